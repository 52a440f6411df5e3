"""Training from a stream: a split read as it is iterated, never prepared on disk, by any number of processes and
data-loader workers (`alternet-train --streaming`).

The files go to the processes and their workers as `datasets.distributed.split_dataset_by_node` deals them, but the
rows are counted first, so that every process trains on the same number of batches (else DDP's all-reduce waits for
ever). Every image keeps its row number in the split, which seeds its augmentation, and an epoch's order follows from
(seed, epoch, processes, workers), so a checkpoint's (epoch, batch) is the stream's position (docs/training.md).
"""

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from tqdm.auto import tqdm

from .collate import collate_images, transform_row
from .rows import DataRowError, raised_message
from .sources import split_files


class StreamBrokenError(OSError):
    """Reading the stream failed part-way through an epoch: the run stops, to resume once the source reads again."""

    def __init__(self, message: str):
        super().__init__(raised_message(message, type(self)))


@dataclass(frozen=True)
class Piece:
    """The rows of file `shard` whose row number in the file is `offset` modulo `stride`."""

    shard: int
    stride: int = 1
    offset: int = 0

    def rows(self, counts: list[int]) -> int:
        return len(range(self.offset, counts[self.shard], self.stride))


def deal(pieces: list[Piece], parts: int, part: int) -> list[Piece]:
    """What `part` of `parts` reads: every `parts`-th piece where there are enough, else every `parts`-th row."""
    if len(pieces) >= parts:
        return pieces[part::parts]
    return [Piece(p.shard, p.stride * parts, p.offset + p.stride * part) for p in pieces]


def turns(batches: list[int], count: int) -> list[int]:
    """Which reader gives each of a process's first `count` batches, reader r having `batches[r]`: one from each in
    turn, passing over those that have run out, whatever order the workers deliver them in (so that resuming works)."""
    order, given = [], [0] * len(batches)
    while len(order) < count and given != batches:
        for reader, total in enumerate(batches):
            if len(order) < count and given[reader] < total:
                order.append(reader)
                given[reader] += 1
    return order


class EpochPlan:
    """Who reads which rows of an epoch: `readers[rank][worker]` (a list of `Piece`s), the full batches each reader
    makes, and `steps`, the batches every process trains on (a multiple of `multiple_of`: the gradient accumulation,
    so that no accumulation window spans two epochs)."""

    def __init__(self, counts: list[int], *, batch_size: int, world_size: int, num_workers: int, multiple_of: int = 1):
        self.counts, self.batch_size, self.world_size = list(counts), batch_size, world_size
        self.first_rows = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(int).tolist()
        every = [Piece(shard) for shard in range(len(self.counts))]
        workers = max(num_workers, 1)
        self.readers = [
            [deal(deal(every, world_size, rank), workers, worker) for worker in range(workers)]
            for rank in range(world_size)
        ]
        self.batches = [
            [sum(piece.rows(self.counts) for piece in reader) // batch_size for reader in process]
            for process in self.readers
        ]
        self.steps = min(sum(process) for process in self.batches) // multiple_of * multiple_of

    @property
    def rows_per_epoch(self) -> int:
        """The rows trained on per epoch, all processes together."""
        return self.steps * self.batch_size * self.world_size

    def describe(self) -> str:
        total = sum(self.counts)
        left_out = f"; {total - self.rows_per_epoch:,} left out each epoch" if total > self.rows_per_epoch else ""
        processes = f" on each of {self.world_size} processes" if self.world_size > 1 else ""
        return (
            f"streaming {total:,} images in {len(self.counts)} file(s): {self.steps} batches of {self.batch_size} "
            f"an epoch{processes}{left_out}"
        )


def row_counts(stream: datasets.IterableDataset, files: list[str] | None) -> list[int]:
    """The rows of each of the stream's shards: from the parquet footers of `files`, else counted over the labels."""
    if files is not None and len(files) == stream.n_shards:
        import fsspec
        import pyarrow.parquet as pq

        counts = []
        for file in tqdm(files, desc="counting rows", unit="file", leave=False):
            with fsspec.open(file, "rb") as handle:
                counts.append(pq.ParquetFile(handle).metadata.num_rows)
        return counts
    labels = stream.select_columns(["label"])
    return [
        sum(len(batch["label"]) for batch in labels.shard(num_shards=stream.n_shards, index=shard).iter(1024))
        for shard in tqdm(range(stream.n_shards), desc="counting rows", unit="file", leave=False)
    ]


class TrainStream(IterableDataset):
    """One process's batches of an epoch of `split`, as `plan` deals them; each reader yields its full batches. The
    epoch and the first batch to yield live in shared memory (`position`), read as each epoch's iterator starts.
    `unreadable` (`data.UnreadableRows`): rows whose image cannot be read are left out and logged there."""

    def __init__(
        self, split, plan: EpochPlan, *, rank, transform, seed: int, shuffle_buffer: int, source: str, unreadable=None
    ):
        split = split.cast_column("image", datasets.Image(decode=False))  # decoded by the reader, errors named
        self.shards = [split.shard(num_shards=split.n_shards, index=shard) for shard in range(split.n_shards)]
        self.num_classes = split.features["label"].num_classes
        self.plan, self.rank, self.transform, self.seed = plan, rank, transform, seed
        self.shuffle_buffer, self.source, self.unreadable = shuffle_buffer, source, unreadable
        self.position = torch.zeros(2, dtype=torch.int64).share_memory_()  # epoch, first batch

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        epoch, first_batch = self.position.tolist()
        pieces = self.plan.readers[self.rank][worker]
        skip = turns(self.plan.batches[self.rank], first_batch).count(worker) * self.plan.batch_size
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker])
        rows = _shuffled(self._rows([pieces[i] for i in rng.permutation(len(pieces))]), self.shuffle_buffer, rng)
        batch, left_out = [], 0
        options = dict(source=self.source, num_classes=self.num_classes, unreadable=self.unreadable)
        for position, (row, image, label) in enumerate(rows):
            if position < skip:  # read again to reach the resumed batch, not decoded
                continue
            pixels = transform_row(image, label, row, self.transform, **options)
            if pixels is None:  # unreadable, left out (`--skip-unreadable`): the next row takes its place
                left_out += 1
                continue
            batch.append({"pixel_values": pixels, "labels": label})
            if len(batch) == self.plan.batch_size:
                yield {**collate_images(batch), "reader": worker}
                batch = []
        if batch and left_out:  # the reader's last batch, short by the rows left out: every planned step happens
            yield {**collate_images(batch), "reader": worker}

    def _rows(self, pieces: list[Piece]) -> Iterator[tuple[int, dict, int]]:
        """(row number in the split, stored image, label) of each piece's rows, file after file."""
        for piece in pieces:
            first_row, count, row = self.plan.first_rows[piece.shard], self.plan.counts[piece.shard], 0
            for batch in self.shards[piece.shard].iter(batch_size=256):
                for image, label in zip(batch["image"], batch["label"]):
                    if row % piece.stride == piece.offset:
                        yield first_row + row, image, label
                    row += 1
            if row != count:
                raise StreamBrokenError(
                    f"{self.source}: file {piece.shard + 1} of {len(self.shards)} holds {row:,} rows, but "
                    f"{count:,} when the run counted them: the split changed under the run"
                )


def _shuffled(rows: Iterator, size: int, rng: np.random.Generator) -> Iterator:
    """`rows` through a shuffle buffer of `size`: each row read replaces one drawn at random, which is handed out."""
    buffer = []
    for row in rows:
        if len(buffer) < size:
            buffer.append(row)
            continue
        drawn = int(rng.integers(size))
        yield buffer[drawn]
        buffer[drawn] = row
    for drawn in rng.permutation(len(buffer)):
        yield buffer[drawn]


class StreamLoader:
    """The training loader of a `TrainStream`: `len(self)` batches an epoch, the same on every process, moved to
    `device`. `set_epoch(epoch)` before each epoch; `starting_at(batch)` resumes inside one."""

    def __init__(self, stream: TrainStream, *, num_workers: int, pin_memory: bool, device, seed: int):
        self.stream, self.device = stream, device
        # Its own generator: making an iterator must not draw from the global RNG (a resumed run makes one more).
        self.dataloader = DataLoader(
            stream,
            batch_size=None,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            pin_memory=pin_memory,
            generator=torch.Generator().manual_seed(seed),
        )

    def __len__(self) -> int:
        return self.stream.plan.steps

    def set_epoch(self, epoch: int) -> None:
        self.stream.position[0], self.stream.position[1] = epoch, 0

    def starting_at(self, batch: int) -> "StreamLoader":
        self.stream.position[1] = batch
        return self

    def __iter__(self) -> Iterator[dict]:
        first = int(self.stream.position[1])
        order = turns(self.stream.plan.batches[self.stream.rank], len(self))
        batches, waiting = iter(self.dataloader), {reader: deque() for reader in set(order)}
        for number in range(first, len(self)):
            while not waiting[order[number]]:
                batch = self._next(batches, number)
                waiting[batch.pop("reader")].append(batch)
            batch = waiting[order[number]].popleft()
            yield {name: tensor.to(self.device, non_blocking=True) for name, tensor in batch.items()}

    def _next(self, batches: Iterator[dict], number: int) -> dict:
        try:
            return next(batches)
        except (DataRowError, StreamBrokenError):
            raise
        except StopIteration:
            raise StreamBrokenError(
                f"{self.stream.source} ended after {number} of the epoch's {len(self)} batches: the split changed "
                "under the run"
            ) from None
        except Exception as error:
            cause = " ".join(raised_message(str(error), type(error)).split())  # on one line
            raise StreamBrokenError(
                f"reading {self.stream.source} failed at batch {number + 1} of {len(self)} ({type(error).__name__}: "
                f"{cause})"
            ) from error


def stream_loader(config, split, transform, *, source: str, pin_memory: bool = False, unreadable=None) -> StreamLoader:
    """This process's training loader over the stream `split`, the rows counted by the main process."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState()
    counts = [row_counts(split, split_files(config.dataset, config.train_split)) if state.is_main_process else None]
    if state.num_processes > 1:
        broadcast_object_list(counts)
    plan = EpochPlan(
        counts[0],
        batch_size=config.batch_size,
        world_size=state.num_processes,
        num_workers=config.num_workers,
        multiple_of=config.gradient_accumulation_steps,
    )
    if plan.steps == 0:
        readers = state.num_processes * max(config.num_workers, 1)
        raise ValueError(
            f"{source}: {sum(plan.counts):,} images in {len(plan.counts)} file(s), dealt to {readers} reader(s) "
            f"({state.num_processes} process(es) × {max(config.num_workers, 1)} loader worker(s)), make no batch of "
            f"{config.batch_size} per process: lower --batch-size or --num-workers"
        )
    stream = TrainStream(
        split,
        plan,
        rank=state.process_index,
        transform=transform,
        seed=config.seed,
        shuffle_buffer=config.shuffle_buffer,
        source=source,
        unreadable=unreadable,
    )
    return StreamLoader(
        stream, num_workers=config.num_workers, pin_memory=pin_memory, device=state.device, seed=config.seed
    )
