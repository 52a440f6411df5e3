"""What a user gets from a released repo, checked before it is published: the card's top-1 is what the repo scores
loaded as its card says, without `alternet_hf`, and the Space predicts what that model predicts (docs/release.md)."""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .checks import ReleaseError

# Predictions of the Space compared with the user's, on the first test images.
SPACE_SAMPLE = 8
# The card's evaluation ran compiled (inductor) and the user's runs eager: both float32, whose rounding differs in
# the last bits, which may flip the argmax of a near-tie. Two images of the test split, at most.
TIED_IMAGES = 2
# Probabilities of one image through two preprocessing paths (PIL in the Space, the image processor's NumPy).
PROBABILITY_TOLERANCE = 1e-4

# A user's interpreter, started with `python -c` in a fresh folder: only transformers, datasets and torch, as a user
# without alternet_hf has. One request per line on stdin (a JSON list: repo, dataset, image column, label column,
# sample), one answer per request on stdout (a line starting with ANSWER), so a release pays its imports once.
USER_EVALUATION = r"""
import json, sys, traceback
sys.modules["alternet_hf"] = None  # as if not installed: remote code that needs it fails here, as for a user
import torch
from datasets import load_dataset
from transformers import AutoImageProcessor, AutoModelForImageClassification

def evaluate(repo, source, image_column, label_column, sample):
    model = AutoModelForImageClassification.from_pretrained(repo, trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(repo, trust_remote_code=True)
    test = load_dataset(source, split="test")
    correct, first = 0, []
    with torch.no_grad():
        for start in range(0, len(test), 250):
            batch = test[start : start + 250]
            images = [image.convert("RGB") for image in batch[image_column]]
            probabilities = model(**processor(images, return_tensors="pt")).logits.float().softmax(-1)
            correct += (probabilities.argmax(-1) == torch.tensor(batch[label_column])).sum().item()
            if start == 0:
                first = probabilities[:sample].tolist()
    return {"top1": correct / len(test), "images": len(test), "probabilities": first}

for line in sys.stdin:
    try:
        answer = evaluate(*json.loads(line))
    except Exception:
        answer = {"error": traceback.format_exc()}
    print("ANSWER " + json.dumps(answer), flush=True)
"""


class UserSession:
    """The user's interpreter (`USER_EVALUATION`), started on first use and kept for every repo of a release; each
    repo's remote code is its own module (named after its folder), so one repo cannot stand in for another."""

    def __init__(self):
        self.process = None

    def evaluate(self, repo: Path, source: str, image_column: str, label_column: str) -> dict:
        """{top1, images, probabilities of the first `SPACE_SAMPLE` test images}, as the user computes them."""
        if Path(source).exists():  # a local dataset, read from another folder
            source = str(Path(source).resolve())
        if self.process is None or self.process.poll() is not None:
            self._start()
        request = [str(Path(repo).resolve()), source, image_column, label_column, SPACE_SAMPLE]
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        answer = next((line for line in self.process.stdout if line.startswith("ANSWER ")), None)
        answer = json.loads(answer.removeprefix("ANSWER ")) if answer else {"error": self._ended()}
        if "error" in answer:
            raise ReleaseError(
                f"{repo} does not load and evaluate as its card tells users to (AutoModelForImageClassification and "
                f"AutoImageProcessor, trust_remote_code=True, without alternet_hf):\n{answer['error'][-2000:]}"
            )
        return answer

    def _start(self) -> None:
        self.close()
        self.folder = tempfile.TemporaryDirectory(prefix="alternet-verify-")
        self.log = open(Path(self.folder.name) / "stderr", "w+")
        self.process = subprocess.Popen(
            [sys.executable, "-c", USER_EVALUATION],
            cwd=self.folder.name,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "PYTHONPATH": ""},
        )

    def _ended(self) -> str:
        status = self.process.wait()
        self.log.seek(0)
        said = self.log.read()[-1500:]
        self.close()
        ended = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        return f"the user's interpreter ended ({ended}); it said:\n{said}"

    def close(self) -> None:
        """End the interpreter (it ends by itself when its input closes: a killed release leaves none behind)."""
        if self.process is None:
            return
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:  # interrupted in the middle of an evaluation
            self.process.kill()
            self.process.wait()
        self.process = None
        self.log.close()
        self.folder.cleanup()


def card_top1(repo: Path) -> float:
    """The clean top-1 the card's `model-index` states (the first accuracy that is not CIFAR-100-C's)."""
    from huggingface_hub import ModelCard

    from alternet_hf.hub.repos import CIFAR_C_METRIC

    results = ModelCard.load(repo / "README.md").data.eval_results or []
    for result in results:
        if result.metric_type == "accuracy" and result.metric_name != CIFAR_C_METRIC:
            return float(result.metric_value)
    raise ReleaseError(f"the card in {repo} states no clean top-1 in its model-index")


def space_probabilities(repo: Path, images) -> list[list[float]]:
    """The Space's class probabilities for `images` (PIL), its model loaded from `repo` as the Space loads it."""
    from alternet_hf.apps.space import Space, load_models

    (loaded,) = load_models(f"model={repo}")
    if loaded.model is None:
        raise ReleaseError(f"the Space cannot load {repo}: {loaded.error}")
    space = Space([loaded])
    return [space.probabilities(image)[0][0].tolist() for image in images]


def verify_repo(
    repo: Path, source: str, dataset_name: str, *, image_column: str, label_column: str, user: UserSession
) -> dict:
    """Check the repo folder as published: the card's top-1 against `user`'s evaluation, and the Space's
    predictions against the user's model on the first test images. Returns what was compared."""
    import numpy as np

    from alternet_hf.data.sources import load_image_classification

    stated, user = card_top1(repo), user.evaluate(repo, source, image_column, label_column)
    allowed = TIED_IMAGES / user["images"]
    if abs(stated - user["top1"]) > allowed:
        raise ReleaseError(
            f"the card of {repo.name} states top-1 {100 * stated:.2f}%, but the repo as a user loads it scores "
            f"{100 * user['top1']:.2f}% on the test split of {dataset_name} ({user['images']:,} images): the card "
            "was written from another model's evaluation, or the weights or image processor in the repo are not "
            "the evaluated model's"
        )
    test = load_image_classification(source, split="test", image_column=image_column, label_column=label_column)
    images = [test[i]["image"] for i in range(len(user["probabilities"]))]
    space, expected = np.array(space_probabilities(repo, images)), np.array(user["probabilities"])
    gap = float(np.abs(space - expected).max())
    if gap > PROBABILITY_TOLERANCE or not np.array_equal(space.argmax(-1), expected.argmax(-1)):
        raise ReleaseError(
            f"the Space's predictions for {repo.name} differ from the model's as a user loads it (class "
            f"probabilities up to {gap:.2g} apart on the first {len(images)} test images, predicted classes "
            f"{space.argmax(-1).tolist()} where the model gives {expected.argmax(-1).tolist()}): the Space prepares "
            "images differently from the repo's image processor"
        )
    return {
        "card_top1": stated,
        "user_top1": user["top1"],
        "images": user["images"],
        "space_images": len(images),
        "space_max_probability_gap": gap,
    }
