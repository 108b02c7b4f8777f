"""Validate what-if predictions on measured sweeps: predict every run from every other run.

    python benchmarks/whatif_validation.py SWEEP_DIR [SWEEP_DIR ...] [--out docs/bench/whatif.json]

Each SWEEP_DIR is an ``overlapscope sweep`` output (``runs/<config>/rep-<k>/``). Every run is
calibrated, and from each run every *other configuration* (policy, forward prefetch, limiter,
link rate) is predicted; the error is ``|predicted − measured| / measured`` of step time and
peak memory, where "measured" is the median over that configuration's repeats (as the sweep
reports it). This is the headline (``config_step_time_err_pct``, ``config_peak_mem_err_pct``).
The per-run columns below compare with each single run instead (every ordered pair of
different runs, same configuration included).

Two further columns separate the model from the machine:

- ``self``: each run predicted from itself (the replay's own error);
- ``schedule-only``: the source's link model and memory baseline, but the *target's*
  compute durations. Compute is the same work in every configuration, so any difference
  between the source's and the target's measured compute is run-to-run noise of the
  machine, which no model of the source can predict; this column shows what is left when
  that noise is removed (the schedule, link and rate-scaling part of the model);
- ``repeat spread``: each run against the median of its own configuration's repeats, the
  machine's floor: a prediction from a run carries that run's deviation;
- ``at the target's forward speed``: the same with the source's compute scaled by the
  target configuration's median forward compute over the source's (forward overlaps no
  transfer): what is left once the machine's speed in the two runs is taken out;
- forward compute by configuration and by place in its sweep (``place_and_policy``), which
  tells a cost of a policy from a place effect of the machine;
- ``contention across runs``: the configuration-level predictions again, with the compute
  slow-down from communication fitted across the runs of the source's link rate instead of
  inside the source run alone, leaving out the target configuration's runs (the fit never
  sees what it predicts);
- ``across runs``: what ``overlapscope whatif --contention-from`` does when given every run
  but the target configuration's: that α, the source's compute scaled to the median
  forward compute of the runs at its link rate, and at another rate its forward compute
  scaled to the median of the runs there (overlapscope/sim/across.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from overlapscope.sim import Calibration, Prediction, Scenario, load_calibration, predict_from
from overlapscope.sim.across import at_speed, contention_across, forward_us, pool_runs


def target_scenario(src: Calibration, tgt: Calibration) -> Scenario:
    s = tgt.measured.scenario
    link = tgt.measured.link_gbit if tgt.measured.link_gbit != src.measured.link_gbit else None
    return dataclasses.replace(s, link_gbit=link)


def err_pct(pred: float, meas: float) -> float:
    return 100.0 * abs(pred - meas) / meas


def compute_per_step_us(c: Calibration) -> float:
    return statistics.mean(sum(r.compute_us.values()) for r in c.ranks.values())


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "worst": float("nan"), "n": 0}
    return {"median": statistics.median(values), "worst": max(values), "n": len(values)}


def run_name(c: Calibration) -> str:
    """A run's configuration and link rate (``lo``: unshaped loopback)."""
    return f"{c.measured.scenario.label}@{c.measured.link_gbit or 'lo'}"


def col(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows]


def by_link(rows: list[dict[str, Any]], column: str, name: str) -> dict[str, Any]:
    return {
        f"{name}_{which}_link": summarize(
            [float(r[column]) for r in rows if r["same_link"] == (which == "same")]
        )
        for which in ("same", "other")
    }


def pair_rows(
    calibs: dict[Path, Calibration],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every run predicted from every run: (pairs of different runs, each run from itself)."""
    pairs: list[dict[str, Any]] = []
    selfs: list[dict[str, Any]] = []
    for sp, src in calibs.items():
        for tp, tgt in calibs.items():
            sc = target_scenario(src, tgt)
            pred = predict_from(src, sc)
            sched = predict_from(
                dataclasses.replace(
                    src,
                    ranks=tgt.ranks,
                    step_compute_us=tgt.step_compute_us,
                    contention=tgt.contention,
                ),
                sc,
            )
            row = {
                "source": run_name(src),
                "target": run_name(tgt),
                "same_link": tgt.measured.link_gbit == src.measured.link_gbit,
                "measured_step_us": tgt.measured.step_time_us,
                "predicted_step_us": pred.step_time_us,
                "step_err_pct": err_pct(pred.step_time_us, tgt.measured.step_time_us),
                "schedule_only_step_err_pct": err_pct(
                    sched.step_time_us, tgt.measured.step_time_us
                ),
                "measured_peak_mem_bytes": tgt.measured.peak_mem_bytes,
                "predicted_peak_mem_bytes": pred.peak_mem_bytes,
                "mem_err_pct": err_pct(pred.peak_mem_bytes, tgt.measured.peak_mem_bytes),
            }
            (selfs if sp == tp else pairs).append(row)

    return pairs, selfs


def schedule_only_us(src: Calibration, tgts: list[Calibration]) -> float:
    """The prediction with each target repeat's own compute, median over the repeats."""
    return statistics.median(
        predict_from(
            dataclasses.replace(
                src, ranks=t.ranks, step_compute_us=t.step_compute_us, contention=t.contention
            ),
            target_scenario(src, t),
        ).step_time_us
        for t in tgts
    )


def across_runs(
    src: Calibration, calibs: dict[Path, Calibration], cfg: str, tgt: Calibration
) -> tuple[Prediction, float]:
    """What ``whatif --contention-from`` does given every run but the target configuration's:
    α and the machine's speed calibrated across the runs at the source's rate, the forward
    speed at another rate across the runs there."""
    others = [c for c in calibs.values() if c is not src and run_name(c) != cfg]
    scenario = target_scenario(src, tgt)
    pooled = pool_runs(src, others, scenario)
    pred = predict_from(
        src,
        scenario,
        contention=pooled.contention,
        speed_scale=pooled.speed_scale,
        forward_scale=pooled.forward_scale,
    )
    return pred, pooled.speed_scale


def config_pair_rows(
    calibs: dict[Path, Calibration],
    by_config: dict[str, list[Calibration]],
    alpha: dict[tuple[float, str], float],
) -> list[dict[str, Any]]:
    """Each other configuration predicted from every run, against its repeats' median."""
    config_rows: list[dict[str, Any]] = []
    for sp, src in calibs.items():
        for cfg, tgts in by_config.items():
            if cfg == run_name(src):
                continue
            pred = predict_from(src, target_scenario(src, tgts[0]))
            across = predict_from(
                src,
                target_scenario(src, tgts[0]),
                contention=alpha[(src.measured.link_gbit or 0.0, cfg)],
            )
            runs, speed = across_runs(src, calibs, cfg, tgts[0])
            sched_cfg = schedule_only_us(src, tgts)
            # the same with the source's compute scaled to the target's forward speed
            fwd = statistics.median(forward_us(t, 0.0) for t in tgts) / forward_us(src, 0.0)
            at_target_speed = predict_from(
                at_speed(across.calibration, fwd),
                target_scenario(src, tgts[0]),
            )
            meas = statistics.median(t.measured.step_time_us for t in tgts)
            mem = statistics.median(t.measured.peak_mem_bytes for t in tgts)
            config_rows.append(
                {
                    "source_run": str(sp),
                    "source": run_name(src),
                    "target_config": cfg,
                    "target_repeats": len(tgts),
                    "same_link": tgts[0].measured.link_gbit == src.measured.link_gbit,
                    "measured_step_us_median": meas,
                    "predicted_step_us": pred.step_time_us,
                    "step_err_pct": err_pct(pred.step_time_us, meas),
                    "schedule_only_step_err_pct": err_pct(sched_cfg, meas),
                    "predicted_step_us_contention_across": across.step_time_us,
                    "step_err_pct_contention_across": err_pct(across.step_time_us, meas),
                    "predicted_step_us_across_runs": runs.step_time_us,
                    "source_speed_scale_across_runs": speed,
                    "step_err_pct_across_runs": err_pct(runs.step_time_us, meas),
                    "target_over_source_forward": fwd,
                    "step_err_pct_at_target_forward_speed": err_pct(
                        at_target_speed.step_time_us, meas
                    ),
                    "measured_peak_mem_bytes_median": mem,
                    "predicted_peak_mem_bytes": pred.peak_mem_bytes,
                    "mem_err_pct": err_pct(pred.peak_mem_bytes, mem),
                }
            )

    return config_rows


def place_and_policy(calibs: dict[Path, Calibration]) -> dict[str, Any]:
    """Each run's forward compute against the median of its own sweep's runs (one repeat at
    one link rate), averaged by configuration and by the run's place in its sweep: forward
    overlaps no transfer, so a difference by configuration that follows the place instead is
    the machine, and one that stays where the place rotates is the configuration's."""
    sweeps: dict[Path, list[tuple[str, Calibration]]] = {}
    for p, c in calibs.items():
        sweeps.setdefault(p.parents[2], []).append(((c.manifest and c.manifest.created) or "", c))
    by_cfg: dict[str, list[float]] = {}
    by_place: dict[str, list[float]] = {}
    for runs in sweeps.values():
        ref = statistics.median(forward_us(c, 0.0) for _, c in runs)
        for place, (_, c) in enumerate(sorted(runs, key=lambda r: r[0])):
            rel = 100.0 * (forward_us(c, 0.0) / ref - 1.0)
            by_cfg.setdefault(c.measured.scenario.label, []).append(rel)
            by_place.setdefault(str(place + 1), []).append(rel)
    return {
        "forward_vs_sweep_median_pct_by_config": {k: statistics.mean(v) for k, v in by_cfg.items()},
        "forward_vs_sweep_median_pct_by_place": {
            k: statistics.mean(v) for k, v in by_place.items()
        },
    }


def summarize_all(
    calibs: dict[Path, Calibration],
    by_config: dict[str, list[Calibration]],
    alpha: dict[tuple[float, str], float],
    config_rows: list[dict[str, Any]],
    pairs: list[dict[str, Any]],
    selfs: list[dict[str, Any]],
    repeat_spread: list[float],
) -> dict[str, Any]:
    """The headline figures (median and worst of each error column) and the fitted inputs."""
    compute = {str(p): compute_per_step_us(c) for p, c in calibs.items()}
    summary: dict[str, Any] = {
        "num_runs": len(calibs),
        "num_configs": len(by_config),
        "config_step_time_err_pct": summarize(col(config_rows, "step_err_pct")),
        "config_peak_mem_err_pct": summarize(col(config_rows, "mem_err_pct")),
        **by_link(config_rows, "step_err_pct", "config_step_time_err_pct"),
        "config_step_time_err_pct_contention_across": summarize(
            col(config_rows, "step_err_pct_contention_across")
        ),
        **by_link(
            config_rows,
            "step_err_pct_contention_across",
            "config_step_time_err_pct_contention_across",
        ),
        "config_step_time_err_pct_across_runs": summarize(
            col(config_rows, "step_err_pct_across_runs")
        ),
        **by_link(config_rows, "step_err_pct_across_runs", "config_step_time_err_pct_across_runs"),
        "contention_across_runs": {f"{k[0]} without {k[1]}": v for k, v in alpha.items()},
        "config_step_time_err_pct_at_target_forward_speed": summarize(
            col(config_rows, "step_err_pct_at_target_forward_speed")
        ),
        "config_schedule_only_step_time_err_pct": summarize(
            col(config_rows, "schedule_only_step_err_pct")
        ),
        **by_link(
            config_rows, "schedule_only_step_err_pct", "config_schedule_only_step_time_err_pct"
        ),
        "num_pairs": len(pairs),
        "step_time_err_pct": summarize(col(pairs, "step_err_pct")),
        "peak_mem_err_pct": summarize(col(pairs, "mem_err_pct")),
        "schedule_only_step_time_err_pct": summarize(col(pairs, "schedule_only_step_err_pct")),
        **by_link(pairs, "step_err_pct", "step_time_err_pct"),
        **by_link(pairs, "schedule_only_step_err_pct", "schedule_only_step_time_err_pct"),
        "self_replay_step_time_err_pct": summarize(col(selfs, "step_err_pct")),
        "repeat_spread_step_time_pct": summarize(repeat_spread),
        "measured_compute_per_step_us": {
            "min": min(compute.values()),
            "max": max(compute.values()),
            "per_run": compute,
        },
        "contention_fitted": {str(p): c.contention for p, c in calibs.items()},
        **place_and_policy(calibs),
    }
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    for k in (
        "config_step_time_err_pct",
        "config_step_time_err_pct_same_link",
        "config_step_time_err_pct_other_link",
        "config_schedule_only_step_time_err_pct",
        "config_schedule_only_step_time_err_pct_same_link",
        "config_schedule_only_step_time_err_pct_other_link",
        "config_step_time_err_pct_contention_across",
        "config_step_time_err_pct_contention_across_same_link",
        "config_step_time_err_pct_contention_across_other_link",
        "config_step_time_err_pct_across_runs",
        "config_step_time_err_pct_across_runs_same_link",
        "config_step_time_err_pct_across_runs_other_link",
        "config_step_time_err_pct_at_target_forward_speed",
        "config_peak_mem_err_pct",
        "step_time_err_pct",
        "schedule_only_step_time_err_pct",
        "schedule_only_step_time_err_pct_same_link",
        "schedule_only_step_time_err_pct_other_link",
        "self_replay_step_time_err_pct",
        "repeat_spread_step_time_pct",
        "peak_mem_err_pct",
    ):
        s = summary[k]
        print(f"{k:34} median {s['median']:6.1f} %  worst {s['worst']:6.1f} %  (n={s['n']})")
    across = summary["contention_across_runs"].values()
    print(
        f"contention fitted across runs (leaving out each target): {min(across):.3f}-{max(across):.3f}"
    )
    for k in ("forward_vs_sweep_median_pct_by_config", "forward_vs_sweep_median_pct_by_place"):
        print(f"{k}: " + ", ".join(f"{n} {v:+.1f} %" for n, v in summary[k].items()))
    mc = summary["measured_compute_per_step_us"]
    print(f"measured compute per step across runs: {mc['min'] / 1e3:.0f}-{mc['max'] / 1e3:.0f} ms")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/bench/whatif.json"))
    args = ap.parse_args(argv)
    runs = sorted(
        p for s in args.sweeps for p in s.glob("runs/*/rep-*") if (p / "run.json").is_file()
    )
    if len(runs) < 2:
        print(f"need at least two runs under {args.sweeps}", file=sys.stderr)
        return 2
    calibs = {p: load_calibration(p) for p in runs}
    pairs, selfs = pair_rows(calibs)
    # Configuration level: predict each other config from every run, against the median of
    # that config's repeats.
    by_config: dict[str, list[Calibration]] = {}
    for c in calibs.values():
        by_config.setdefault(run_name(c), []).append(c)
    links = sorted({c.measured.link_gbit or 0.0 for c in calibs.values()})
    # per link rate, fitted without each target configuration's runs in turn
    alpha = {
        (link, cfg): contention_across(
            [
                c
                for c in calibs.values()
                if (c.measured.link_gbit or 0.0) == link and run_name(c) != cfg
            ]
        )
        for link in links
        for cfg in by_config
    }
    config_rows = config_pair_rows(calibs, by_config, alpha)
    # The machine's own floor: how far each run lies from the median of its configuration's
    # repeats. A prediction from a run carries that run's deviation, whatever the model.
    repeat_spread = [
        err_pct(c.measured.step_time_us, statistics.median(t.measured.step_time_us for t in tgts))
        for tgts in by_config.values()
        if len(tgts) > 1
        for c in tgts
    ]
    summary = summarize_all(calibs, by_config, alpha, config_rows, pairs, selfs, repeat_spread)
    print_summary(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "python benchmarks/whatif_validation.py " + " ".join(map(str, args.sweeps)),
        "sweeps": [str(s) for s in args.sweeps],
        "summary": summary,
        "config_pairs": config_rows,
        "pairs": pairs,
        "self": selfs,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
