"""The demo that ``make demo`` runs (``python -m safebunny.demo``)."""

__all__: list[str] = []
