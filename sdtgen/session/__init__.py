"""The one host session over narrow targets: specs, events, traces, aggregations, the console."""
