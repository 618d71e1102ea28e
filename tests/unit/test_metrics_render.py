"""The Prometheus text of saga metrics (pure)."""

from __future__ import annotations

from safebunny.amqp.management import management_url_for
from safebunny.saga.look.metrics import render


def test_render_writes_help_type_and_one_line_per_step_leaving_unknowns_out() -> None:
    text = render("shop", [{"step": "stock.OrderPlaced", "received": 12, "parked": 0, "backlog": None,
                            "inputRowsPerSecond": 2.5},
                           {"step": 'odd"step', "received": 3}])
    lines = text.splitlines()
    assert "# TYPE safebunny_step_received_total counter" in lines
    assert 'safebunny_step_received_total{saga="shop",step="stock.OrderPlaced"} 12' in lines
    assert 'safebunny_step_received_total{saga="shop",step="odd\\"step"} 3' in lines
    assert 'safebunny_step_parked_total{saga="shop",step="stock.OrderPlaced"} 0' in lines
    assert 'safebunny_step_input_rows_per_second{saga="shop",step="stock.OrderPlaced"} 2.5' in lines
    assert "safebunny_step_backlog" not in text  # unknown is left out, not reported as 0
    assert text.endswith("\n")


def test_the_management_api_is_looked_for_on_the_broker_host() -> None:
    assert management_url_for("amqp://u:p@rabbit.example:5672/%2F") == "http://rabbit.example:15672"
    assert management_url_for("amqps://rabbit.example/vh") == "https://rabbit.example:15672"
