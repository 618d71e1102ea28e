package safebunny.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}

/** A dependency-free self-test of [[Ids]], run by the offline build right after compiling.
  *
  * `java -cp <jar>:scala-library.jar safebunny.spark.SelfTest [vectors.tsv]` checks a few
  * built-in vectors and, if given, every line of a tab-separated file with the lines
  * `msg<TAB>causation<TAB>node<TAB>type<TAB>index<TAB>expected` and
  * `corr<TAB>business_key<TAB>expected` (written from `tests/vectors/message_ids.json`).
  * Prints `SELFTEST OK <n>` and exits 0, or names each mismatch and exits 1.
  */
object SelfTest {
  private val builtIn: Seq[Seq[String]] = Seq(
    Seq("msg", "order-1", "billing", "InvoiceRequested", "0", "60067207-ef67-59c9-9017-1ebaa193416e"),
    Seq("msg", "order-1", "billing", "InvoiceRequested", "1", "be6386d2-5fce-5dfd-95ef-f285c5fa73aa"),
    Seq("corr", "order-1", "170c3ea1-3bf5-5b52-9945-af4bf88a1eba")
  )

  def check(row: Seq[String]): Option[String] = {
    val (got, expected) = row match {
      case Seq("msg", c, n, t, i, e) => (Ids.messageId(c, n, t, i.toLong), e)
      case Seq("corr", k, e)         => (Ids.correlationId(k), e)
      case other                     => return Some(s"malformed vector line: ${other.mkString("\\t")}")
    }
    if (got == expected) None else Some(s"${row.mkString(" | ")}: got $got")
  }

  def main(args: Array[String]): Unit = {
    import scala.jdk.CollectionConverters._
    val fromFile = args.headOption.toSeq.flatMap { path =>
      Files.readAllLines(Paths.get(path), UTF_8).asScala.filter(_.nonEmpty).map(_.split("\t", -1).toSeq)
    }
    val rows = builtIn ++ fromFile
    val failures = rows.flatMap(check)
    failures.foreach(f => System.err.println("SELFTEST MISMATCH " + f))
    if (failures.nonEmpty) sys.exit(1)
    println(s"SELFTEST OK ${rows.size}")
  }
}
