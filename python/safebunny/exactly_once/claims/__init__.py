"""A batch's claim across epochs: :mod:`.log` (the claim files), :mod:`.fence` (the pure fencing rules),
:mod:`.takeover` (effect commits beside other claims) and :mod:`.batch_claims` (the protocol's use of them)."""

__all__: list[str] = []
