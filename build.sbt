// The safebunny JVM shim: safebunny_message_id / safebunny_correlation_id as Spark SQL functions.
// `tools/sbt package` (sbt's launcher fetched with Maven, caches under ~/.cache/safebunny/sbt; needs Maven Central)
// -> target/scala-2.13/safebunny-shim_2.13-<version>.jar; `make shim-jar` builds it and runs the id vectors on it (CI).
// Offline (no network; `make test` tests it too): `python scala_shim/build_offline.py`, or
// `safebunny.spark.shim.jar_path()` from Python; both compile the same sources with the Scala compiler
// that ships in pyspark's jars/ folder.
//
// The canonical Scala sources live in python/safebunny/scala/ so that the Python wheel ships them
// (an installed safebunny builds its own jar); scala_shim/src/main/scala is kept as the
// conventional place for extra JVM-only sources.

ThisBuild / scalaVersion := "2.13.18"
ThisBuild / organization := "io.github.safebunny"
ThisBuild / version := "0.1.0"

val sparkVersion = "4.2.0" // compiles against any Spark 4.x: only the public UDF API is used (4.3.0 is not on Maven Central)

lazy val shim = (project in file("."))
  .settings(
    name := "safebunny-shim",
    Compile / unmanagedSourceDirectories ++= Seq(
      baseDirectory.value / "python" / "safebunny" / "scala",
      baseDirectory.value / "scala_shim" / "src" / "main" / "scala"
    ),
    libraryDependencies += "org.apache.spark" %% "spark-sql" % sparkVersion % "provided",
    javacOptions ++= Seq("--release", "17"),
    scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature"),
    // `sbt run` / `sbt "runMain safebunny.spark.SelfTest tests/vectors.tsv"` see the provided jars
    Compile / run := Defaults.runTask(Compile / fullClasspath, Compile / run / mainClass, Compile / run / runner).evaluated,
    Compile / mainClass := Some("safebunny.spark.SelfTest")
  )
