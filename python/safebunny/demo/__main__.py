"""``python -m safebunny.demo``: what ``make demo`` runs."""

import sys

from safebunny.demo.pipeline import main

sys.exit(main())
