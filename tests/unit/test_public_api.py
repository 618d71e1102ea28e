"""``dir(safebunny)`` lists the public API only: no ``Any``, ``TYPE_CHECKING``, ``annotations`` or ``sys``."""

from __future__ import annotations

import safebunny


def test_dir_of_safebunny_is_its_public_names():
    names = dir(safebunny)
    assert not {"Any", "TYPE_CHECKING", "annotations", "sys", "typing"} & set(names)
    assert names == sorted(set(safebunny.__all__))
    for name in names:
        getattr(safebunny, name)  # each resolves (lazy names too)
    assert "error_of" in names
