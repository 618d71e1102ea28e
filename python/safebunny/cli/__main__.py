"""``python -m safebunny.cli``."""

import sys

from safebunny.cli.main import main

sys.exit(main())
