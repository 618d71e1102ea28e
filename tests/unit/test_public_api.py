"""``dir(safebunny)`` lists the public API only: no ``Any``, ``TYPE_CHECKING``, ``annotations`` or ``sys``."""

from __future__ import annotations

import pytest

import safebunny


def test_dir_of_safebunny_is_its_public_names():
    names = dir(safebunny)
    assert not {"Any", "TYPE_CHECKING", "annotations", "sys", "typing"} & set(names)
    assert names == sorted(set(safebunny.__all__))
    for name in names:
        getattr(safebunny, name)  # each resolves (lazy names too)
    assert "error_of" in names


def test_a_module_imported_by_its_path_before_it_moved_is_our_error_naming_the_new_one():
    import importlib

    from safebunny.errors import SafeBunnyError, SafeBunnyMovedError

    for old, new in (("safebunny.saga.topology", "safebunny.saga.define.topology"),
                     ("safebunny.saga.status", "safebunny.saga.look.status"),
                     ("safebunny.saga.queries", "safebunny.saga.run.queries")):
        with pytest.raises(SafeBunnyMovedError, match=f"{old} moved to {new}") as raised:
            importlib.import_module(old)
        assert isinstance(raised.value, SafeBunnyError) and isinstance(raised.value, ImportError)
        assert importlib.import_module(new).__name__ == new
    with pytest.raises(ModuleNotFoundError):  # a name that never existed is Python's own error
        importlib.import_module("safebunny.saga.nothing_here")
