"""The message columns a stream reader hands to Spark: all of them, or those a schema names.

Spark's Python data sources have no column pruning: whatever a partition yields, the JVM turns
into rows, every column of every row, before any ``select`` drops them. The message schema has
nine columns, among them a map of attributes (the costliest kind to convert) and three
timestamps; a query that keeps ``message_id`` and ``body`` paid for all nine. A schema given to
the reader (``spark.readStream.format("leaseq").schema("message_id string, body binary")``)
names the columns to yield, in its order, and the JVM converts only those.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..client.arrow import MESSAGE_SCHEMA
from ._executor import spark_arrow_schema

__all__ = ["OutputColumns"]

_SPARK_MESSAGE_SCHEMA = spark_arrow_schema(MESSAGE_SCHEMA)


def _spark_types() -> dict[str, Any]:
    from pyspark.sql.pandas.types import from_arrow_schema

    return {f.name: f.dataType for f in from_arrow_schema(_SPARK_MESSAGE_SCHEMA).fields}


class OutputColumns:
    """The columns (Arrow fields, Spark-nullable) a reader yields for the schema it was given."""

    def __init__(self, schema: Any = None) -> None:
        fields = getattr(schema, "fields", None)
        if not fields:
            self.schema = _SPARK_MESSAGE_SCHEMA
        else:
            types = _spark_types()
            wrong = [f for f in fields if types.get(f.name) != f.dataType]
            if wrong:
                expected = ", ".join(f"{name} {t.simpleString()}" for name, t in types.items())
                given = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in wrong)
                raise ValueError(
                    f"the leaseq source's schema may name message columns only, each with its "
                    f"type ({expected}); not: {given}"
                )
            self.schema = pa.schema([_SPARK_MESSAGE_SCHEMA.field(f.name) for f in fields])
        self.names = self.schema.names

    def batches(self, table: pa.Table) -> list[pa.RecordBatch]:
        """``table`` (``MESSAGE_SCHEMA``, one receive) sorted by message id, as these columns."""
        ordered = table.sort_by("message_id").select(self.names)
        batches: list[pa.RecordBatch] = ordered.cast(self.schema).to_batches()
        return batches
