"""The SQL content-filter language of telemq (RegSub ``<Filter>``, the Spark ``filter`` option).

Theory of operation
-------------------
A filter is a boolean SQL-92 conditional expression over one publication: its JSON payload
(``temp``, ``site.name``, ``readings[0]``, ``Body.x``), the metrics of its Sparkplug B
payload (``Metric['Pressure']``, `metrics`) and its properties
(``Properties.Topic``, ``QoS``, ``Retain``, ``ClientId``, ``UserId``, ``SubPoint``, and the
MQTT 5.0 ``ContentType`` and ``User.<name>``; ESQL's ``Root.MQMD.UserIdentifier`` and
``Root.Properties.<name>`` are aliases). The language is specified in design section 7
and documented in ``docs/filters.md``.

Text goes through a pipeline of small parts, each with one job::

    text --tokens.tokenize--> tokens --parser--> AST --check--> checked AST
         checked AST --evaluate--> Python closures   (the broker, per message)
                     --spark-----> a pyspark Column   (the pipeline, per row)
                     --render----> canonical text     (storage, equality, messages)

- `tokens`: one regular expression, linear; lexical errors at the offending character.
- `parser`: operator precedence with explicit stacks: no recursion, so no input can reach
  Python's recursion limit; nesting is capped at 64 levels and text at 65,536 characters.
- `ast`: frozen dataclasses; chains (``a OR b OR ...``, ``a + b + ...``) are n-ary nodes.
- `check`: identifier forms, literal values, LIKE escapes, "is this a condition".
- `evaluate`: closures with three-valued logic, ``None`` being UNKNOWN.
- `message`: what filters read of a publication; a `Message` parses the payload once for
  all filters (as JSON for fields, as Sparkplug B for metrics: `metrics`).
- `filterset`: many filters against one message, grouped by canonical text and indexed
  on equality/IN conjuncts.
- `spark` (imported on demand, the only place pyspark is used): the same semantics as
  native Spark expressions over the journal's columns.
- `render`: the canonical printer; ``compile_filter(f.text) == f``.

Every invalid filter raises `FilterError` with ``reason == 3150`` (``MQRCCF_FILTER_ERROR``)
and the 0-based ``position`` of the problem. This package imports nothing else from telemq
but `telemq.sparkplug`, on the first ``Metric[...]`` evaluated (to decode a payload).
"""

from __future__ import annotations

from .ast import PROPERTY_NAMES, USER_PROPERTY_PREFIX
from .compiled import Filter, compile_filter
from .errors import MQRCCF_FILTER_ERROR, FilterError
from .filterset import FilterSet
from .message_view import Message, parse_payload
from .parser import MAX_DEPTH, parse
from .render import render
from .tokens import MAX_LENGTH

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MQRCCF_FILTER_ERROR",
    "PROPERTY_NAMES",
    "USER_PROPERTY_PREFIX",
    "Filter",
    "FilterError",
    "FilterSet",
    "Message",
    "compile_filter",
    "parse",
    "parse_payload",
    "render",
]
