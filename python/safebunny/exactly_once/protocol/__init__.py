"""The step's protocol: :mod:`.step` (:class:`~safebunny.exactly_once.protocol.step.Step`, whose ``process``
reads as the numbered steps), :mod:`.settings`, :mod:`.epoch` and :mod:`.report` (:class:`BatchReport`)."""

__all__: list[str] = []
