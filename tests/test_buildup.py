"""`alternet-buildup`: the paper's build-up rules as functions and as a search, which walks the paper's own path
when given the paper's decisions, and end to end on the digits: killed in a candidate's training and run again, it
reads what was finished, resumes the rest and ends where an uninterrupted search ends."""

import json
import shutil
import signal

import pytest
from commands import kill_once_written, run_command, start_command
from transformers import AutoModelForImageClassification

import alternet_hf  # noqa: F401  (registers the classes for AutoModel)
from alternet_hf.apps import buildup
from alternet_hf.models.presets import create_config
from alternet_hf.training.recipe import TrainingConfig

ALTERNET_50 = create_config("alternet-50-cifar100")


def test_the_rules_name_one_more_msa_at_the_latest_open_stage_first_and_the_earlier_ones_after():
    depths = ALTERNET_50.depths  # 3, 4, 6, 4
    assert buildup.next_candidates((0, 0, 0, 0), depths) == [
        (3, (0, 0, 0, 1)),
        (2, (0, 0, 1, 0)),
        (1, (0, 1, 0, 0)),
        (0, (1, 0, 0, 0)),
    ]
    assert buildup.next_candidates((0, 0, 0, 2), depths)[0] == (2, (0, 0, 1, 2))  # the last stage is full
    assert buildup.next_candidates((0, 0, 1, 2), depths, up_to=1)[0] == (1, (0, 1, 1, 2))
    assert buildup.next_candidates((1, 2, 3, 2), depths) == []


def test_given_the_papers_decisions_the_search_walks_its_path_to_alternet_50(tmp_path, monkeypatch):
    """The paper's CIFAR-100 path: an MSA at the end of c4 (kept), a second there (kept), one at the end of c3 (kept),
    a second in c3 (rejected), one at the end of c2 (kept), a second in c2 (rejected), one in c1 (rejected)."""
    decisions = iter(["kept", "kept", "kept", "rejected", "kept", "rejected", "rejected"])
    trained = []

    def train_layout(config, root, layout, stage, seeds, say):
        trained.append(layout)
        return buildup.Step(layout, stage, 0.8, 0.01, [0.8], 1, 1.0, "start", "", [str(tmp_path / "none")])

    monkeypatch.setattr(buildup, "_train_layout", train_layout)
    monkeypatch.setattr(buildup, "_judge", lambda step, current, seeds: (next(decisions), "scripted"))
    config = TrainingConfig(model="alternet-50-cifar100", output_dir=str(tmp_path))
    result = buildup.search(config, say=lambda _: None)
    assert trained == [
        (0, 0, 0, 0),
        (0, 0, 0, 1),
        (0, 0, 0, 2),
        (0, 0, 1, 2),
        (0, 0, 2, 2),
        (0, 1, 1, 2),
        (0, 2, 1, 2),
        (1, 1, 1, 2),
    ]
    assert result.final_layout == tuple(ALTERNET_50.num_attention_blocks) == (0, 1, 1, 2)
    assert result.stopped == "no earlier stage is left to try"
    written = json.loads((tmp_path / "buildup.json").read_text())
    assert [step["decision"] for step in written["steps"]][:3] == ["start", "kept", "kept"]
    assert (tmp_path / "buildup.png").stat().st_size > 0 and "| 7 | 1, 1, 1, 2 | stage 1 |" in (
        tmp_path / "buildup.md"
    ).read_text()


def test_every_candidate_within_the_noise_is_reported_as_a_budget_too_small(tmp_path, monkeypatch):
    monkeypatch.setattr(
        buildup,
        "_train_layout",
        lambda config, root, layout, stage, seeds, say: buildup.Step(
            layout, stage, 0.5, 0.05, [0.5], 1, 1.0, "start", "", [str(tmp_path / "none")]
        ),
    )
    config = TrainingConfig(model="alternet-18-cifar10", output_dir=str(tmp_path))
    monkeypatch.setattr(buildup, "_judge", lambda step, current, seeds: ("undecided", "within the noise"))
    result = buildup.search(config, say=lambda _: None)
    assert result.undecided and result.final_layout == (0, 0, 0, 0)
    assert "the budget is too small to decide" in result.summary()


TINY = '{"hidden_sizes": [8, 16], "embedding_size": 8, "depths": [2, 2], "num_attention_heads": [1, 1], "attention_head_dim": 8}'  # noqa: E501


def _command(folder: str, *more: str) -> list[str]:
    """A tiny search on the digits: the CNN, then an MSA at the end of the second stage and (rule 2's fallback, or
    the next step) at the end of the first."""
    return ["alternet-buildup", "--model-overrides", TINY, "--epochs", "1", "--save-every-steps", "4"] + [
        "--output-dir",
        folder,
        *more,
    ]


@pytest.mark.commands
def test_a_search_killed_in_a_candidate_resumes_it_and_ends_where_one_run_side_by_side_ends(tmp_path):
    """The uninterrupted search trains both candidates at once (--jobs 2, one process each); the killed one trains
    them one after the other in its own process: the same path, to the last digit."""
    whole = run_command(_command("whole", "--jobs", "2"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert "training msa-0-1-seed0, msa-1-0-seed0 side by side" in whole.stdout
    assert "build-up: msa-0-0 " in whole.stdout

    process = start_command(_command("killed"), cwd=tmp_path)
    pointer = tmp_path / "killed" / "candidates" / "msa-0-1-seed0" / "checkpoints" / "latest"
    kill_once_written(process, pointer)
    assert process.returncode == -signal.SIGKILL, "the search ended before it could be killed"
    assert not (tmp_path / "killed" / "buildup.json").exists()

    again = run_command(_command("killed"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "msa-0-0-seed0: trained before, read" in again.stdout and "msa-0-1-seed0: resuming" in again.stdout
    paths = [json.loads((tmp_path / name / "buildup.json").read_text()) for name in ("whole", "killed")]
    assert [s["accuracy"] for s in paths[0]["steps"]] == [s["accuracy"] for s in paths[1]["steps"]]
    assert paths[0]["final_layout"] == paths[1]["final_layout"]
    final = AutoModelForImageClassification.from_pretrained(tmp_path / "killed" / "final")
    assert final.config.num_attention_blocks == paths[1]["final_layout"]

    # Moved (copied as `cp -r` copies, without times, the original gone): every candidate is read where it now is.
    shutil.copytree(tmp_path / "whole", tmp_path / "moved", copy_function=shutil.copy)
    shutil.rmtree(tmp_path / "whole")
    moved = run_command(_command("moved"), cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert "training" not in moved.stdout and "resuming" not in moved.stdout, moved.stdout
    assert moved.stdout.count("trained before, read") == 3, moved.stdout
    path = json.loads((tmp_path / "moved" / "buildup.json").read_text())
    assert [s["accuracy"] for s in path["steps"]] == [s["accuracy"] for s in paths[0]["steps"]]
    assert (tmp_path / "moved" / "final" / "model.safetensors").is_file()


@pytest.mark.commands
@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--model", "vit-ti-cifar10"], "vit-ti-cifar10 is not an AlterNet: the build-up rules re-lay out"),
        (["--start-layout", "0", "5"], "start layout [0, 5] does not fit the stages' depths [2, 2, 2, 2]"),
        (["--max-msa", "0"], "--max-msa must be at least 1, not 0"),
        (["--jobs", "0"], "--jobs must be at least 1, not 0"),
    ],
)
def test_a_baseline_or_layout_the_rules_cannot_use_is_refused_before_training(arguments, message, tmp_path):
    completed = run_command(["alternet-buildup", *arguments], cwd=tmp_path)
    assert completed.returncode == 2 and message in completed.stderr
    assert not (tmp_path / "outputs").exists()


def test_a_candidate_recorded_with_other_settings_is_refused_not_reused(tmp_path):
    config = TrainingConfig(model="alternet-18-cifar10", output_dir=str(tmp_path / "msa-0-0-0-1-seed0"))
    folder = tmp_path / "msa-0-0-0-1-seed0"
    folder.mkdir()
    recorded = {**config.to_dict(), "learning_rate": 0.1, "num_workers": 4}  # workers may change, what it learns not
    (folder / buildup.RECORD).write_text(json.dumps({"training_config": recorded}))
    with pytest.raises(FileExistsError, match=r"trained with other settings \(learning_rate\)"):
        buildup.train_candidate(config, say=lambda _: None)
    recorded["learning_rate"] = config.learning_rate
    (folder / buildup.RECORD).write_text(json.dumps({"training_config": recorded, "accuracy": 0.5}))
    assert buildup.train_candidate(config, say=lambda _: None)["accuracy"] == 0.5
