# SPDX-License-Identifier: Apache-2.0
"""`kvviz shrink --diff --backend sglang|vllm` and `kvviz fuzz --diff --backend ...`: a divergence
from a real engine cut to a small scenario that still diverges the same way (its known issue
kept), and a fuzz session against vLLM that finds nothing, as the agreement test says."""

from __future__ import annotations

from click.testing import CliRunner
from engine_guard import require_engine

require_engine("sglang")
require_engine("vllm")

from kvviz.cli import cli  # noqa: E402
from kvviz.compare.failure import diff_mode, first_failure  # noqa: E402
from kvviz.core.demos import load_demo  # noqa: E402
from kvviz.core.scenario import parse_scenario  # noqa: E402
from kvviz.report.bundle import open_bundle  # noqa: E402


def kvviz(*args):
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


def test_shrink_diff_on_sglang_cuts_the_split_refresh_demo_and_keeps_its_known_issue(tmp_path):
    out, bundle = tmp_path / "min.kvs", tmp_path / "min.json"
    code, stdout, stderr = kvviz("shrink", "sglang-split-refresh", "--diff", "--backend", "sglang", "-o", str(out),
                                 "--bundle", str(bundle), "--max-seconds", "300")
    assert code == 1, stderr
    assert "# fails kvcore vs sglang (diff): the caches diverge first on cached, after known issue SG2" in stdout
    minimal = parse_scenario(out.read_text())
    assert len(minimal.steps) < len(load_demo("sglang-split-refresh").steps)
    failure = first_failure(minimal, diff_mode("sglang")).failure  # it still diverges, and SG2 explains it
    assert failure is not None and failure.identity.cause == "SG2" and failure.identity.source == "divergence"
    assert open_bundle(bundle).session.backend.name == "sglang"  # the bundle is SGLang's side of the diff


def test_fuzz_diff_on_vllm_finds_nothing_and_exits_0():
    code, stdout, stderr = kvviz("fuzz", "--diff", "--backend", "vllm", "--runs", "150", "--max-seconds", "300")
    assert code == 0, (stdout, stderr)
    assert stdout.startswith("kvviz fuzz kvcore vs vllm (diff), seed 0: 150 runs of 40 ops, 150 passed, 0 failed")


def test_fuzz_diff_on_sglang_names_its_known_issues_as_known():
    code, stdout, stderr = kvviz("fuzz", "--diff", "--backend", "sglang", "--runs", "40", "--no-shrink",
                                 "--max-seconds", "300")
    assert code == 1, stderr
    rows = {line.split()[0]: line.split()[1] for line in stdout.splitlines()[2:] if line.startswith("  SG")}
    assert rows and set(rows) <= {"SG1", "SG2", "SG3"}, stdout
    assert all(known == ("design" if name == "SG1" else "defect") for name, known in rows.items()), stdout


def test_every_demo_op_on_the_engines_has_its_sub_steps_the_adapters_record_included():
    """A bundle points at the sub-step where a failure shows: every op's sub-steps must build,
    the last one (kvviz's adapter taking pages, keeping the handle) included."""
    from kvviz.commands import BadInput, make_session
    from kvviz.core.demos import demo_names

    built = {}
    for backend, kind in (("sglang", "trie"), ("vllm", "hash")):
        built[backend] = 0
        for name in demo_names():
            try:
                session = make_session(load_demo(name), kind, backend)
            except BadInput:  # a demo the engine cannot express (vLLM has no priorities)
                continue
            for step in range(1, len(session)):
                kinds = [sub.kind for sub in session.substeps(step)]
                built[backend] += len(kinds)
    assert built["sglang"] > 500 and built["vllm"] > 500, built
