"""Labels as the zoo's models count them: a `ClassLabel` whose names are the model's classes, whatever a source stored
(integers, strings, another `ClassLabel` order), and the class names a model's config knows."""

import datasets


def encode_labels(dataset, class_names: list[str] | None = None, *, num_classes: int | None = None):
    """The `label` column as a `ClassLabel` whose names are `class_names` (when given): plain integers keep their
    values, strings and other names are looked up by name. Labels outside `class_names` are an error: a silently
    renumbered class would score against the wrong one. A stream's plain labels need `class_names` or `num_classes`.
    """
    feature = dataset.features["label"]
    if isinstance(feature, datasets.ClassLabel):
        if class_names is None or list(feature.names) == list(class_names):
            return dataset
        return _reindex_by_name(dataset, feature.names, class_names)
    integers = isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint"))
    if isinstance(dataset, datasets.IterableDataset):  # labels checked as rows are read (`with_transform`)
        if class_names is None and integers and num_classes is not None:
            class_names = [str(i) for i in range(num_classes)]
        if class_names is None:
            raise ValueError(
                f"a stream's labels must be a ClassLabel, or the class names given: its label column is {feature}. "
                "Read it without streaming (--streaming off: its labels are then scanned for the classes)"
            )
        if feature.dtype == "string" or not isinstance(feature, datasets.Value):
            dataset = dataset.cast_column("label", datasets.Value("string"))
        return dataset.cast_column("label", datasets.ClassLabel(names=list(class_names)))
    values = dataset.unique("label")
    if integers:
        count = len(class_names) if class_names is not None else max(values, default=-1) + 1
        bad = sorted(v for v in values if not 0 <= v < count)
        if bad:
            raise ValueError(f"integer labels {bad[:10]} are outside 0…{count - 1} ({count} classes)")
        if class_names is None and count - len(values) > len(values):
            raise ValueError(
                f"integer labels run up to {count - 1} but only {len(values)} distinct values occur "
                f"({sorted(values)[:10]}…): that would build a {count}-class model in which {count - len(values)} "
                "classes never occur. If the labels are ids rather than class indices 0…K-1, map them to 0…K-1, "
                "or store the column as strings or a ClassLabel (each distinct value becomes one class)"
            )
        return dataset.cast_column("label", datasets.ClassLabel(names=class_names or [str(i) for i in range(count)]))
    values = [str(v) for v in values]
    names = list(class_names) if class_names is not None else sorted(values)
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"labels {unknown[:10]} are not among the {len(names)} classes {names[:10]}…")
    if feature.dtype != "string":
        dataset = dataset.cast_column("label", datasets.Value("string"))
    return dataset.cast_column("label", datasets.ClassLabel(names=names))


def class_names_of(config) -> list[str] | None:
    """A model config's class names in index order, or None where they say nothing but the index
    (transformers' "LABEL_i" defaults, or "i" from integer labels): then indices are matched as they are."""
    id2label = getattr(config, "id2label", None) or {}
    names = [id2label[i] for i in range(len(id2label))] if set(id2label) == set(range(len(id2label))) else []
    if not names or names in ([f"LABEL_{i}" for i in range(len(names))], [str(i) for i in range(len(names))]):
        return None
    return names


def _reindex_by_name(dataset: datasets.Dataset, names: list[str], class_names: list[str]) -> datasets.Dataset:
    unknown = sorted(set(names) - set(class_names))
    if unknown:
        raise ValueError(f"classes {unknown[:10]} of this split are not among the {len(class_names)} expected")
    index = {i: class_names.index(name) for i, name in enumerate(names)}
    features = dataset.features.copy()
    features["label"] = datasets.ClassLabel(names=list(class_names))
    return dataset.map(lambda batch: {"label": [index[i] for i in batch["label"]]}, batched=True, features=features)
