"""``python -m safebunny``: the command line, as the ``safebunny`` command (:mod:`safebunny.cli.main`)."""

import sys

from safebunny.cli.main import main

sys.exit(main())
