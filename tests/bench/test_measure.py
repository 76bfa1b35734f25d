"""bench's measurements against known answers: a stage measures what the same file measures standalone, and
two equal stages pipelined on two free cores beat one worker (relative checks only, never a wall-clock time)."""

from __future__ import annotations

import time

import onnxruntime as ort
import pytest

from onnxpart.bench import Options, bench
from onnxpart.bench.sessions import Settings
from onnxpart.bench.timing import time_calls
from onnxpart.runtime import random_inputs, session_options

#: a stage's median within this factor of the standalone run's (the two runs share a noisy machine)
TOLERANCE = 0.35


def test_a_stage_measures_like_its_standalone_run(chain_folder):
    """The standalone run is timed before and after bench, so a load that changes meanwhile (the other test
    worker) widens the range instead of failing the check."""
    model, folder = chain_folder
    session = ort.InferenceSession(str(folder / "stage_0.onnx"), sess_options=session_options(threads=1),
                                   providers=["CPUExecutionProvider"])
    feeds = random_inputs(session, 0)
    before = time_calls(lambda: session.run(None, feeds), 3, 15).median
    result = bench(folder, Options(runs=15, warmup=3, settings=Settings(threads=1), micro_batches=4))
    after = time_calls(lambda: session.run(None, feeds), 3, 15).median
    stage = next(r for r in result.rows if r.unit == "stage_0")
    low, high = min(before, after) * (1 - TOLERANCE), max(before, after) * (1 + TOLERANCE)
    assert low <= stage.measured <= high, (stage.measured, before, after)
    assert result.summary["bottleneck_stage_predicted"] in {"stage_0", "stage_1"}


@pytest.mark.free_cores
@pytest.mark.usefixtures("two_free_cores")
def test_two_equal_stages_on_two_workers_beat_one(chain_folder):
    _, folder = chain_folder
    result = bench(folder, Options(runs=5, warmup=2, settings=Settings(threads=1), micro_batches=24))
    assert result.summary["throughput_measured"] > result.summary["throughput_one_worker"], result.summary


def test_units_compared_with_one_another_are_timed_in_rounds():
    """Every round calls each unit once, so a slow spell of a shared machine slows them all alike."""
    from onnxpart.bench.timing import time_rounds

    calls: list[str] = []
    timings = time_rounds([lambda: calls.append("a"), lambda: calls.append("b")], warmup=1, runs=3)
    assert calls == ["a", "b"] * 4
    assert [t.runs for t in timings] == [3, 3]


def test_timing_goes_on_past_runs_in_whole_rounds_until_min_seconds():
    from onnxpart.bench.timing import time_rounds

    calls: list[str] = []

    def slow() -> None:
        calls.append("a")
        time.sleep(0.01)

    timings = time_rounds([slow, lambda: calls.append("b")], warmup=0, runs=2, min_seconds=0.1)
    assert timings[0].runs == timings[1].runs > 2
    assert calls == ["a", "b"] * timings[0].runs
    assert time_rounds([], warmup=1, runs=3, min_seconds=1.0) == []


def test_a_bunched_stream_s_period_is_its_mean_rate_not_its_median_gap():
    """Results that come out in pairs: the median gap (1 ms) is one mode, the rate is one input per 4 ms."""
    from onnxpart.bench.timing import stream_period

    done = [0.0, 0.001, 0.002, 0.012, 0.013, 0.014, 0.024]
    assert stream_period(done) == pytest.approx(0.004)
    assert stream_period([1.0, 1.5]) == pytest.approx(0.5)


def test_each_stage_gets_its_busy_time_inside_the_streaming_pipeline(chain_folder):
    """A ``pipeline-stage`` row per stage, of the order of the stage alone (timed inside its worker: the
    stage's runs, however loaded the machine), and the summary's slowdown is the largest ratio of the two."""
    _, folder = chain_folder
    result = bench(folder, Options(runs=5, warmup=2, settings=Settings(threads=1), micro_batches=8))
    alone = {r.unit: r.measured for r in result.rows if r.kind == "stage"}
    inside = {r.unit: r.measured for r in result.rows if r.kind == "pipeline-stage"}
    assert set(inside) == set(alone) == {"stage_0", "stage_1"}
    for unit, seconds in inside.items():
        assert seconds > 0 and seconds < 10 * alone[unit], (unit, seconds, alone[unit])
    assert result.summary["pipeline_slowdown"] == max(inside[u] / alone[u] for u in alone)


def test_the_pipeline_s_speed_up_row_is_a_ratio_against_the_predicted_latency_over_period(chain_folder):
    _, folder = chain_folder
    result = bench(folder, Options(runs=5, warmup=1, settings=Settings(threads=1), micro_batches=4))
    rows = {r.kind: r for r in result.rows if r.unit == "pipeline"}
    speed_up = rows["pipeline-speed-up"]
    assert speed_up.quantity == "ratio"
    assert speed_up.predicted == pytest.approx(rows["pipeline-latency"].predicted / rows["pipeline-period"].predicted)
    assert speed_up.spread.runs == rows["pipeline-period"].spread.runs >= 2  # a round per stream
    assert rows["pipeline-latency"].spread.runs == 4 * speed_up.spread.runs  # micro_batches single inputs a round
    assert 0 < speed_up.measured == result.summary["speed_up_in_turns"]
    assert result.summary["speed_up_in_turns_predicted"] == speed_up.predicted
    spread = speed_up.to_dict()["spread"]
    assert set(spread) == {"median", "q1", "q3", "min", "max", "runs"}


def test_a_pipeline_is_measured_in_turns_of_a_stream_and_single_inputs():
    """Each round: one stream, then as many single inputs; rounds until ``runs`` single inputs have run."""
    from onnxpart.bench.timing import in_turns

    calls: list[str] = []

    def stream(count: int) -> list[float]:
        calls.append(f"stream {count}")
        return [0.0, 1.0, 2.0, 3.0][:count]

    def one() -> float:
        calls.append("one")
        return 3.0

    turns = in_turns(stream, one, 3, runs=4)
    assert calls == ["stream 3", "one", "one", "one"] * 2
    assert turns.periods == [1.0, 1.0] and turns.singles == [3.0] * 6 and turns.speed_ups == [3.0, 3.0]


def test_a_speed_up_measured_in_turns_does_not_move_with_the_machine_s_drift():
    """A machine that gets slower round after round (each round 1.5 × the last): the stream's period spreads
    over a factor of 5, the speed-up measured in its rounds stays the pipeline's 2."""
    from onnxpart.bench.timing import Streamed, in_turns

    speed = [1.0]

    def stream(count: int) -> list[float]:
        speed[0] *= 1.5
        return [i * speed[0] for i in range(count)]

    turns = in_turns(stream, lambda: 2.0 * speed[0], 4, runs=20)
    streamed = Streamed.of(turns, [])
    assert streamed.period.high / streamed.period.low > 5
    assert streamed.speed_up.low == pytest.approx(2.0) == streamed.speed_up.high
