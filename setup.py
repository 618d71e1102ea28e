"""One installable distribution: the core library ``safebunny`` and its Spark plugin
``pyspark_safebunny`` (a top-level module, so Spark finds it by itself).

PySpark is not a requirement: a Spark cluster or a Databricks runtime brings its own, and a second one
installed over it breaks that environment. ``pip install 'safebunny[spark]'`` adds it for a local install;
``safebunny.spark.version`` checks the running one (4.2 or newer)."""

from setuptools import find_packages, setup

setup(
    name="safebunny",
    version="0.1.0",
    description="Exactly-once RabbitMQ sagas on Spark Structured Streaming",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    package_dir={"safebunny": "python/safebunny", "pyspark_safebunny": "connector/pyspark_safebunny"},
    packages=["pyspark_safebunny", "safebunny", *(f"safebunny.{p}" for p in find_packages("python/safebunny"))],
    package_data={"safebunny": ["py.typed", "scala/*.scala"], "pyspark_safebunny": ["py.typed"]},
    install_requires=[
        "pika>=1.3,<2",  # the consumer hands deliveries to its callback through pika 1.x internals (F6)
        "orjson>=3.9",
        "pyarrow>=15",
        "numpy>=1.24",  # the inbox index (sorted id hashes)
        "deltalake>=1.0",
        "rstream>=0.20",  # the stream protocol: the fast path for stream queues (small: mmh3, typing_extensions)
    ],
    extras_require={
        # a local install (the suite runs 4.3 with make test, 4.2.0 with make test-runtime); pandas only for PySpark,
        # which warns on pandas 3: kept out of the core's requirements so a runtime's pandas stays as it is
        "spark": ["pyspark[sql]>=4.2,<4.4", "pandas<3"],
        "test": ["pytest>=8,<9.2", "pytest-timeout", "hypothesis>=6", "ruff>=0.5", "testcontainers[rabbitmq]>=4",
                 # make test's two workers; xdist 3.8 groups by renaming item._nodeid, which pytest 9.2 no longer reads
                 "pytest-xdist>=3",
                 "pyspark[connect]>=4.2,<4.4", "pandas<3",  # a local Spark Connect server for the Connect tests
                 "moto[server]>=5",  # an S3-compatible store on a loopback port for the object-store tests
                 "matplotlib>=3.7", "tqdm>=4.60",  # the demo's chart and progress bar, which the suite runs
                 # the saga page in a real browser: drives Debian's chromium through its chromedriver (no download)
                 "selenium>=4.20",
                 # a FUSE mount that behaves as a Unity Catalog volume (no rename, no hard link), on Debian's libfuse2
                 "fusepy>=3"],
        "plots": ["matplotlib>=3.7", "tqdm>=4.60"],  # the demo's chart and progress bar
        "bench": ["matplotlib>=3.7", "psutil", "tqdm>=4.60", "py-spy"],
        "stream": [],  # kept so that 'safebunny[stream]' still installs: rstream is a dependency now
    },
    entry_points={"console_scripts": ["safebunny=safebunny.cli:main"]},
)
