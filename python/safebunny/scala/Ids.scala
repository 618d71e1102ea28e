package safebunny.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.security.MessageDigest
import java.util.UUID

/** The deterministic ids of safebunny, byte for byte the rule of `python/safebunny/ids.py`.
  *
  * The id is a UUIDv5 (SHA-1, RFC 9562) under the fixed [[Namespace]] of the UTF-8 encoding of
  * `tag` followed by `"|" + len + ":" + field` for each field, where `len` is the field's length
  * in UTF-8 bytes written in decimal. `java.util.UUID.nameUUIDFromBytes` is MD5 (v3), so v5 is
  * built here. Pure JVM code: no Spark needed.
  */
object Ids {
  val Namespace: UUID = UUID.fromString("3f0c3a4e-5b1d-5c6e-9a7f-2b8e4d1c6a90")
  val MessageTag: String = "safebunny.msg.v1"
  val CorrelationTag: String = "safebunny.corr.v1"

  private val namespaceBytes: Array[Byte] = {
    val b = java.nio.ByteBuffer.allocate(16)
    b.putLong(Namespace.getMostSignificantBits).putLong(Namespace.getLeastSignificantBits)
    b.array()
  }

  private val sha1 = new ThreadLocal[MessageDigest] {
    override def initialValue(): MessageDigest = MessageDigest.getInstance("SHA-1")
  }

  /** The UTF-8 bytes of the length-prefixed encoding of `fields` under `tag`. */
  def encodeName(tag: String, fields: String*): Array[Byte] = {
    val out = new java.io.ByteArrayOutputStream(64)
    out.write(tag.getBytes(UTF_8))
    fields.foreach { field =>
      val bytes = field.getBytes(UTF_8)
      out.write('|')
      out.write(Integer.toString(bytes.length).getBytes(UTF_8))
      out.write(':')
      out.write(bytes)
    }
    out.toByteArray
  }

  /** The UUIDv5 of `name` under `namespace` (RFC 9562 section 5.5). */
  def uuid5(namespace: Array[Byte], name: Array[Byte]): UUID = {
    val md = sha1.get()
    md.reset()
    md.update(namespace)
    md.update(name)
    val h = md.digest()
    h(6) = ((h(6) & 0x0f) | 0x50).toByte
    h(8) = ((h(8) & 0x3f) | 0x80).toByte
    val buf = java.nio.ByteBuffer.wrap(h, 0, 16)
    new UUID(buf.getLong(), buf.getLong())
  }

  private def check(name: String, value: String): String = {
    if (value == null || value.isEmpty)
      throw new IllegalArgumentException(
        s"safebunny: '$name' must be a non-empty string, but got ${quote(value)}; pass the id or name it stands for")
    value
  }

  private def quote(value: String): String = if (value == null) "null" else "'" + value + "'"

  /** The id of the `index`-th message of type `messageType` sent to `node` because of the
    * message `causationId` (the same as `safebunny.ids.message_id`). */
  def messageId(causationId: String, node: String, messageType: String, index: Long): String = {
    check("causation_id", causationId)
    check("node", node)
    check("message_type", messageType)
    if (index < 0)
      throw new IllegalArgumentException(s"safebunny: 'index' must be an integer >= 0, but got $index")
    uuid5(namespaceBytes, encodeName(MessageTag, causationId, node, messageType, java.lang.Long.toString(index)))
      .toString
  }

  /** A saga's correlation id derived from a business key (the same as
    * `safebunny.ids.correlation_id_for`). */
  def correlationId(businessKey: String): String = {
    check("business_key", businessKey)
    uuid5(namespaceBytes, encodeName(CorrelationTag, businessKey)).toString
  }
}
