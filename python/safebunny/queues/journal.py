"""The source's journal, which keeps each planned batch of a classic or quorum queue on durable storage.

A batch's messages are written here *before* its end offset is returned to Spark, and read
back by the executors; a replay after a crash therefore returns exactly the logged batch.
Files are Arrow IPC streams named by the batch's sequence range, written to a temporary
name and renamed, so a reader never sees half a file (on an object store or a Unity Catalog volume, which have no
rename, each is written whole in place: :func:`~safebunny.storage.writes.writes_whole`). Any filesystem pyarrow
knows works (local paths, ``file://``, ``s3://``, ``gs://``, ``hdfs://``, ``/Volumes/...``). Deliveries become the
source's Arrow rows here (:func:`deliveries_to_table`), and journaled rows come back in the query's current shape
(:func:`fit_headers`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from safebunny.amqp.message_rows import AmqpColumns, arrow_schema
from safebunny.errors import SafeBunnyDataLossError, SafeBunnyOptionError
from safebunny.storage.location import resolve_location
from safebunny.storage.records import list_records, remove_record
from safebunny.storage.writes import write_atomically

if TYPE_CHECKING:
    from safebunny.queues.consumer import Delivery

__all__ = ["Journal", "batch_file_name", "parse_batch_file_name", "deliveries_to_table", "fit_headers"]

_NAME = re.compile(r"^batch-(\d{20})-(\d{20})\.arrow$")


def batch_file_name(start_seq: int, end_seq: int) -> str:
    """The file holding the messages with sequence numbers in ``(start_seq, end_seq]``."""
    return f"batch-{start_seq:020d}-{end_seq:020d}.arrow"


def parse_batch_file_name(name: str) -> tuple[int, int] | None:
    match = _NAME.match(name)
    return (int(match[1]), int(match[2])) if match else None


def fit_headers(batch: pa.RecordBatch, include_headers: bool, start_seq: int, end_seq: int) -> pa.RecordBatch:
    """A journaled batch in the query's current shape: ``includeHeaders`` may have changed since it was
    written. Headers the query no longer wants are dropped; headers it wants but the journal never
    kept cannot be made up, which is a clear error rather than an Arrow schema mismatch."""
    has = "headers" in batch.schema.names
    if has and not include_headers:
        return batch.drop_columns(["headers"])
    if include_headers and not has:
        raise SafeBunnyOptionError(
            f"The batch ({start_seq}, {end_seq}] was journaled with includeHeaders=false, and the query now asks "
            "for headers: a replay cannot invent them. Set option 'includeHeaders' back to 'false' until this "
            "batch has committed (one run), then turn it on.", "includeHeaders")
    return batch


def deliveries_to_table(queue: str, deliveries: list[Delivery], include_headers: bool) -> pa.Table:
    """The source's rows for ``deliveries``, as a table whose record batches each hold at most
    ``MAX_CHUNK_BYTES`` of bodies: a batch of any total size can be journaled, although one Arrow
    ``binary`` array holds less than 2 GiB."""
    columns = AmqpColumns(include_headers)
    columns.extend([d.body for d in deliveries], [d.properties for d in deliveries],
                   [d.exchange for d in deliveries], [d.routing_key for d in deliveries],
                   [d.redelivered for d in deliveries])
    batches = columns.to_batches(queue)
    return pa.Table.from_batches(batches, schema=arrow_schema(include_headers, include_offset=True))


class Journal:
    """Batches of one query's source, under ``location``."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.fs, self.root = resolve_location(location)

    def ensure(self) -> None:
        """Create the directory; fail clearly when it cannot be written."""
        try:
            self.fs.create_dir(self.root, recursive=True)
        except OSError as exc:
            raise SafeBunnyOptionError(
                f"Cannot create option 'journalLocation' {self.location!r}: {exc}. Point it at a writable "
                "directory that every executor can read.",
                "journalLocation",
            ) from None

    def path_of(self, start_seq: int, end_seq: int) -> str:
        """The path of the batch file of ``(start_seq, end_seq]`` (as :meth:`files` names it)."""
        return f"{self.root.rstrip('/')}/{batch_file_name(start_seq, end_seq)}"

    def write(self, start_seq: int, end_seq: int,
              data: pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch]) -> str:
        """Durably write a batch (temporary file, fsync where local, rename) and return its path.

        ``data`` is one record batch, a table, or a non-empty list of record batches of one schema; they
        are kept as separate record batches in the file (a batch of messages may exceed what one Arrow
        ``binary`` array can hold) and :meth:`read` yields them in order."""
        if not isinstance(data, pa.Table):
            batches = [data] if isinstance(data, pa.RecordBatch) else data
            if not batches:
                raise ValueError("data must hold at least one record batch, but got none")
            data = pa.Table.from_batches(batches)  # no copy: each batch stays one chunk
        table = data
        path = self.path_of(start_seq, end_seq)

        def stream(sink: Any) -> None:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)

        write_atomically(self.fs, path, stream, durable=True)
        return path

    def exists(self, start_seq: int, end_seq: int) -> bool:
        return self.fs.get_file_info(self.path_of(start_seq, end_seq)).type == pafs.FileType.File

    def read(self, start_seq: int, end_seq: int) -> Iterator[pa.RecordBatch]:
        """Yield the record batches of a logged batch; raise when its file is gone."""
        path = self.path_of(start_seq, end_seq)
        try:
            source = self.fs.open_input_stream(path)
        except FileNotFoundError:
            raise self.missing(start_seq, end_seq) from None
        with source:
            reader = pa.ipc.open_stream(source)
            yield from reader

    def rows(self, start_seq: int, end_seq: int, include_headers: bool) -> Iterator[pa.RecordBatch]:
        """The logged batch's rows in the query's current shape (:func:`fit_headers`), as
        the source's executors serve them and a step reads them on the driver; raise when its file is gone."""
        for batch in self.read(start_seq, end_seq):
            yield fit_headers(batch, include_headers, start_seq, end_seq)

    def missing(self, start_seq: int, end_seq: int) -> SafeBunnyDataLossError:
        return SafeBunnyDataLossError(
            f"The journal of the batch of messages ({start_seq}, {end_seq}] is missing from "
            f"{self.location!r} ({batch_file_name(start_seq, end_seq)}). Spark logged this batch, so "
            "its messages cannot be served again exactly. Restore the file, or set option "
            "'failOnDataLoss' to 'false' to skip the batch (its messages were requeued by the broker "
            "and will be read again as redelivered)."
        )

    def files(self) -> list[tuple[str, int]]:
        """``(path, end_seq)`` of every batch file and leftover temporary file, by listing the location."""
        found = []
        for info in list_records(self.fs, self.root):
            name = info.base_name
            parsed = parse_batch_file_name(name.split(".arrow")[0] + ".arrow") if ".arrow" in name else None
            if parsed is not None:
                found.append((info.path, parsed[1]))
        return found

    def delete_path(self, path: str) -> bool:
        """Delete one file of :meth:`files`; False when it is already gone."""
        return remove_record(self.fs, path)

    def delete(self, start_seq: int, end_seq: int) -> bool:
        """Delete the batch file of ``(start_seq, end_seq]`` without listing the location; False when it is
        already gone."""
        return self.delete_path(self.path_of(start_seq, end_seq))

    def delete_through(self, end_seq: int) -> int:
        """Delete every batch file (and leftover temporary file) ending at or before ``end_seq``."""
        return sum(self.delete_path(path) for path, end in self.files() if end <= end_seq)
