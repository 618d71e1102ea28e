"""``python -m safebunny.demo``: what ``make demo`` runs."""

import sys

from safebunny.demo.main import main

sys.exit(main())
