"""The journal outside the broker: its Arrow encoding and the journal service's client.

`arrow` turns store ranges into Arrow record batches (the broker's journal service and the
data source's offline path share it); `client` talks to a broker's journal service over HTTP
(the data source's network path), and reads the subscriptions of its admin API on the same
listener (replay's `--subscription` over the journal service). Both sit below the broker
and the pipeline: the broker serves the journal without importing the pipeline, and the
pipeline reads it without importing the broker.
"""

ARROW_STREAM_TYPE = "application/vnd.apache.arrow.stream"
"""The media type of an Arrow IPC stream (what the journal service sends). Here, not in
`arrow`, so that naming it needs no pyarrow."""

__all__ = ["ARROW_STREAM_TYPE"]
