"""What ``stepscope serve`` takes in, turned into stepscope's runs, spans and samples on one clock and written by
one writer:

- ``decode``: request bodies (gzip, deflate, br) with an output limit;
- ``envelope``, ``sentry``: Sentry envelopes split into items; transactions and profiles (v1, chunks v2)
  validated into records;
- ``spanstream``: the Sentry SDK's streamed ``span`` items;
- ``otlp_decode``: OTLP/HTTP trace requests (protobuf or JSON) and the answers OTLP/HTTP specifies;
- ``steps``: steps of spans recorded elsewhere, from their names;
- ``apply``: records into the store (a run per transaction, or per trace and resource);
- ``writer``, ``writer_process``: the one writer, in a process of its own: envelopes spooled, answered, then
  expanded into runs.
"""
