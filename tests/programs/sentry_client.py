"""The seed's own code with only the DSN pointed home: the real sentry_sdk, functions_to_trace by
qualified name, a transaction around a txt2img call (tiny pipeline, random weights) or a plain loop."""
import argparse
import sys

import sentry_sdk


def work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def outer(k):
    for _ in range(k):
        work(300_000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dsn", nargs="?", default=None)
    ap.add_argument("--profiles", choices=["v1", "chunks"], default="v1")
    ap.add_argument("--compression", choices=["gzip", "br"], default="br")
    ap.add_argument("--sd", action="store_true", help="trace a tiny Stable Diffusion pipeline")
    ap.add_argument("--spotlight", default=None)
    ap.add_argument("--transactions", type=int, default=1)
    args = ap.parse_args()
    traced = [{"qualified_name": "__main__.work"}, {"qualified_name": "__main__.outer"}]
    if args.sd:
        traced = [{"qualified_name": q} for q in (
            "diffusers.StableDiffusionPipeline.__call__", "diffusers.UNet2DConditionModel.forward",
            "diffusers.DDIMScheduler.step", "diffusers.AutoencoderKL.decode")]
    kw = dict(traces_sample_rate=1.0, functions_to_trace=traced,
              _experiments={"transport_compression_algo": args.compression})
    if args.profiles == "v1":
        kw["profiles_sample_rate"] = 1.0
    else:
        kw.update(profile_session_sample_rate=1.0, profile_lifecycle="trace")
    if args.spotlight:
        kw["spotlight"] = True if args.spotlight == "true" else args.spotlight  # True: $SENTRY_SPOTLIGHT or :8969
    sentry_sdk.init(dsn=args.dsn, **kw)
    if args.sd:
        from stepscope.pipelines.sd import build_pipeline

        pipe = build_pipeline("tiny")
    for i in range(args.transactions):
        with sentry_sdk.start_transaction(name="txt2img" if args.sd else f"loop-{i}", op="task"):
            if args.sd:
                pipe("a cat", num_inference_steps=4, height=64, width=64)
            else:
                outer(6)
    sentry_sdk.flush()
    if args.profiles == "chunks":
        # the chunk is sent when the profiler stops: its thread ends by itself once no transaction is left to
        # profile, handing the chunk to the transport on its way out; wait for that, then for the transport
        from sentry_sdk.profiler import continuous_profiler

        thread = getattr(continuous_profiler._scheduler, "thread", None)
        if thread is None:
            sys.exit("the SDK's continuous profiler never ran (no profiler thread)")
        thread.join(60)
        if thread.is_alive():
            sys.exit("the SDK's continuous profiler did not stop within 60 s of the last transaction")
        sentry_sdk.flush()
    print("sent")


if __name__ == "__main__":
    main()
