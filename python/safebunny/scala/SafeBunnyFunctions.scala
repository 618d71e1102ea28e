package safebunny.spark

import org.apache.spark.sql.{Column, SparkSession}
import org.apache.spark.sql.api.java.{UDF1, UDF4}
import org.apache.spark.sql.expressions.UserDefinedFunction
import org.apache.spark.sql.functions.udf

/** The Spark SQL functions of safebunny, evaluated in the JVM (no Python worker involved).
  *
  *  - `safebunny_message_id(causation_id, node, type, index)` -> string
  *  - `safebunny_correlation_id(business_key)` -> string
  *
  * A null argument gives a null result; an empty string or a negative index fails the query
  * with an error that names the argument, as `safebunny.ids` raises in Python.
  *
  * Register them in a session with `SafeBunnyFunctions.register(spark)` (Scala), with
  * `safebunny.spark.shim.register(spark)` (Python), or, where only SQL is available, with
  * `spark.udf.registerJavaFunction` on [[MessageIdUDF]] and [[CorrelationIdUDF]].
  */
object SafeBunnyFunctions {
  val MessageIdName: String = "safebunny_message_id"
  val CorrelationIdName: String = "safebunny_correlation_id"

  /** `safebunny_message_id` as a typed Scala UDF: Spark casts the arguments to
    * (string, string, string, bigint) as it does for built-in functions. */
  val messageIdUdf: UserDefinedFunction = udf(
    (causationId: String, node: String, messageType: String, index: java.lang.Long) =>
      if (causationId == null || node == null || messageType == null || index == null) null
      else Ids.messageId(causationId, node, messageType, index.longValue)
  ).withName(MessageIdName)

  /** `safebunny_correlation_id` as a typed Scala UDF. */
  val correlationIdUdf: UserDefinedFunction = udf(
    (businessKey: String) => if (businessKey == null) null else Ids.correlationId(businessKey)
  ).withName(CorrelationIdName)

  /** Register both functions in `spark`'s function registry (session-scoped, like any
    * temporary function). Calling it again is harmless. */
  def register(spark: SparkSession): Unit = {
    spark.udf.register(MessageIdName, messageIdUdf)
    spark.udf.register(CorrelationIdName, correlationIdUdf)
  }

  /** DataFrame API: `df.withColumn("id", messageId($"cause", lit("billing"), lit("Invoice"), $"i"))`. */
  def messageId(causationId: Column, node: Column, messageType: Column, index: Column): Column =
    messageIdUdf(causationId, node, messageType, index)

  /** DataFrame API: the correlation id of a business key column. */
  def correlationId(businessKey: Column): Column = correlationIdUdf(businessKey)
}

/** An entry point for callers that can only name a class with a no-argument constructor
  * (py4j through a class loader, `java.util.function.Consumer` plumbing): `accept(spark)`
  * registers the functions. */
class Registrar extends java.util.function.Consumer[SparkSession] {
  override def accept(spark: SparkSession): Unit = SafeBunnyFunctions.register(spark)
}

/** `safebunny_message_id` as a Java UDF class, for `spark.udf.registerJavaFunction(
  * "safebunny_message_id", "safebunny.spark.MessageIdUDF", "string")` (works over Spark Connect
  * too, after `spark.addArtifacts(jar)`). Java UDFs get no argument casts, so the index may
  * arrive as any integral type or a decimal string. */
class MessageIdUDF extends UDF4[String, String, String, AnyRef, String] {
  override def call(causationId: String, node: String, messageType: String, index: AnyRef): String =
    if (causationId == null || node == null || messageType == null || index == null) null
    else Ids.messageId(causationId, node, messageType, MessageIdUDF.toIndex(index))
}

object MessageIdUDF {
  private[spark] def toIndex(index: AnyRef): Long = index match {
    case n: java.lang.Long    => n.longValue
    case n: java.lang.Integer => n.longValue
    case n: java.lang.Short   => n.longValue
    case n: java.lang.Byte    => n.longValue
    case d: java.math.BigDecimal if d.signum == 0 || d.stripTrailingZeros.scale <= 0 => d.longValueExact
    case s: String if s.nonEmpty && s.forall(Character.isDigit) => s.toLong
    case other =>
      throw new IllegalArgumentException(
        s"safebunny: 'index' must be an integer >= 0, but got '$other' (${other.getClass.getName}); cast it to BIGINT")
  }
}

/** `safebunny_correlation_id` as a Java UDF class, for `spark.udf.registerJavaFunction`. */
class CorrelationIdUDF extends UDF1[String, String] {
  override def call(businessKey: String): String =
    if (businessKey == null) null else Ids.correlationId(businessKey)
}
