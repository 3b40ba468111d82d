"""A program instrumented with the OpenTelemetry SDK (not stepscope): a pipeline-shaped trace (a pipeline call, per
step a UNet forward and a scheduler step, step 2 slow), exported over OTLP/HTTP (protobuf) by the SDK's own exporter.

    python otel_client.py OUT_DIR [--endpoint URL --key KEY] [--gzip] [--host NAME] [--job ID] [--rank N]
                          [--shift-ns NS] [--collectives N] [--steps N]

Writes OUT_DIR/spans.json (every span as the SDK finished it: ids in hex, parent, name, start/end in Unix ns, as
recorded, before any clock shift) and OUT_DIR/request.pb (the same spans as one ExportTraceServiceRequest, encoded by
the exporter's own encoder) for the tests to send again by hand. ``--shift-ns`` moves every time by NS (a host whose
wall clock is off); ``--collectives N``: N all_reduce spans (op ``collective``) that end at fixed instants shared by
every "host" of a test (their ends are multiples of 50 ms from ``--base-ns``).
"""

import argparse
import json
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

PIPE = "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion.StableDiffusionPipeline.__call__"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
SCHED = "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step"


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--endpoint")
    ap.add_argument("--key")
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--host", default="host-a")
    ap.add_argument("--job")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--shift-ns", type=int, default=0)
    ap.add_argument("--collectives", type=int, default=0)
    ap.add_argument("--base-ns", type=int, default=0)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    attrs = {"service.name": "otel-sd", "host.name": args.host}
    if args.job:
        attrs["stepscope.job.id"] = args.job
    if args.rank is not None:
        attrs.update({"stepscope.rank": args.rank, "stepscope.world_size": 2})
    provider = TracerProvider(resource=Resource.create(attrs))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if args.endpoint:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=args.endpoint, headers={"X-Sentry-Auth": f"Sentry sentry_key={args.key}"},
                                    compression=Compression.Gzip if args.gzip else Compression.NoCompression)
        provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("otel_client")
    sh = args.shift_ns
    if args.collectives:
        # a training-shaped trace: steps, each ending in an all_reduce that every rank leaves at one instant
        for k in range(args.collectives):
            end = args.base_ns + (k + 1) * 50_000_000
            with tracer.start_as_current_span("train_step", start_time=end - 45_000_000 + sh, end_on_exit=False) as st:
                c = tracer.start_span("torch.distributed.distributed_c10d.all_reduce",
                                      start_time=end - 10_000_000 - 1_000_000 * (args.rank or 0) + sh,
                                      attributes={"stepscope.op": "collective", "stepscope.collective.bytes": 4096})
                c.end(end_time=end + sh)
                st.end(end_time=end + 1_000_000 + sh)
    else:
        with tracer.start_as_current_span(PIPE, attributes={"code.function.name": PIPE}):
            for i in range(args.steps):
                with tracer.start_as_current_span("UNet2DConditionModel.forward", attributes={"code.function.name": UNET}):
                    busy(0.04 if i == 2 else 0.01)
                with tracer.start_as_current_span("DDIMScheduler.step", attributes={"code.function.name": SCHED}):
                    busy(0.002)
    provider.shutdown()  # (exports what the batch processor holds, waits for the answer)
    spans = memory.get_finished_spans()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spans.json").write_text(json.dumps([
        {"trace_id": f"{s.context.trace_id:032x}", "span_id": f"{s.context.span_id:016x}",
         "parent": f"{s.parent.span_id:016x}" if s.parent else None, "name": s.name, "start": s.start_time,
         "end": s.end_time, "attributes": dict(s.attributes or {})} for s in spans]))
    (out / "request.pb").write_bytes(encode_spans(spans).SerializeToString())
    print("sent" if args.endpoint else "written")


if __name__ == "__main__":
    main()
