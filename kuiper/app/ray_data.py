"""kuiper inside Ray Data: a folder of images classified by a pool of actors, each holding one graph.

    import ray
    from kuiper.app import ray_data

    ray.init()                                  # or ray.init(address="auto") on a cluster
    run = ray_data.classify_folder("models/fashion_cnn/fashion_cnn.pnnx.param", "models/fashion_cnn/samples",
                                   actors=2)   # a folder.FolderRun, rows in the folder's order

The piece for a pipeline of your own is `Classifier`, the class for `Dataset.map_batches(Classifier,
fn_constructor_kwargs={...}, compute=ActorPoolStrategy(size=N))` over a Dataset with a `path` column: the
actors read the files themselves (so every node must see them, as a shared folder), or take their contents
from a `bytes` column where there is one (`ray.data.read_binary_files(URLS, include_paths=True)`, for files
elsewhere, as in object storage). Reading in the actors spares a Ray task per block of files: on a small
machine starting those tasks' worker processes costs more than the reading. Ray builds the class once per
actor, so each actor loads the graph once and keeps it; every image is decoded and prepared by kuiper's
own code (kuiper/app/images.py, kuiper/app/folder.py, the model's preprocess.json), so the results are those
of `kuiper run MODEL --input FOLDER`.

Each actor limits its threads, kuiper's and BLAS's, to the CPUs it asks Ray for (`threads`, 1 by default):
two actors that each used every core of the machine would fight over them.

Needs the `ray` extra: `pip install "kuiper[ray]"`; ray is imported only when one of these is used.
"""

from __future__ import annotations

from pathlib import Path

import kuiper
from kuiper.app import accuracy, folder, images, labels, model_preprocess
from kuiper.core.errors import ConfigError, ImageError

INSTALL = 'pip install "kuiper[ray]"'
BATCH = 8  # images per forward, as `kuiper run` takes them from a folder
# images per call of an actor: Ray's cost per call (tens of ms) is spread over many forwards
ROWS_PER_CALL = 256


def import_ray():
    """ray with its data library, or a ConfigError that says what to install."""
    try:
        import ray
        import ray.data  # noqa: F401  (the data library is a separate extra of ray)
    except ImportError:
        raise ConfigError(f"running on Ray needs ray[data]: {INSTALL}") from None
    return ray


def _schema():
    import pyarrow as pa  # comes with ray[data]

    return pa.schema([("path", pa.string()), ("index", pa.int64()), ("label", pa.string()),
                      ("score", pa.float64()), ("indices", pa.list_(pa.int64())),
                      ("labels", pa.list_(pa.string())), ("values", pa.list_(pa.float64()))])


class Classifier:
    """The callable class for `map_batches`: a batch of {"path"} or {"path", "bytes"} in, one row per image out
    (path; the best class's index, label and score; the top-k indices, labels and values, best first). Labels are null
    where the classes have no names; an image that cannot be read is left out, with a warning in the actor's
    log.

    `model`, `backend`, `device`, `precision`: as for kuiper.load. `preprocess`: an images.Preprocess (default:
    what `kuiper run` uses for the model's input, its preprocess.json included). `names`: class names, or a
    file of them (default: the preprocess.json's, else ImageNet's for 1000 classes). `threads`: kuiper's and
    BLAS's threads in this actor. `batch`: images per forward (a call of the actor may bring many more)."""

    def __init__(self, model, backend: str = "numpy", device=None, precision: str = "fp32", preprocess=None,
                 names=None, topk: int = 5, threads: int = 1, batch: int = BATCH):
        from threadpoolctl import threadpool_limits

        # kept for the actor's life: the limit lasts as long as the object
        self._blas = threadpool_limits(limits=threads, user_api="blas")
        kuiper.set_num_threads(threads)
        self.graph = kuiper.load(model, backend=backend, device=device, precision=precision)
        if len(self.graph.input_operators) != 1:
            raise ConfigError(f"{model}: a folder of images needs a model with one input, this one has "
                              f"{len(self.graph.input_operators)}")
        own, names_file = model_preprocess.for_graph(model, self.graph)
        self.pre = preprocess if preprocess is not None else own
        names = names if names is not None else names_file
        self.names = labels.read_names(names) if isinstance(names, (str, Path)) else names
        self.topk, self.batch = topk, batch

    def __call__(self, batch: dict):
        import pyarrow as pa

        paths, rows = [str(p) for p in batch["path"]], []
        data = list(batch["bytes"]) if "bytes" in batch else None
        for start in range(0, len(paths), self.batch):
            end = start + self.batch
            rows += folder.classify_batch(self.graph, paths[start:end], self.pre, self.topk, self.names,
                                          None if data is None else data[start:end]).rows
        return pa.Table.from_pylist([{
            "path": row.path, "index": row.indices[0], "score": row.values[0],
            "label": row.labels[0] if row.labels else None,
            "indices": row.indices, "labels": row.labels, "values": row.values,
        } for row in rows], schema=_schema())


def folder_images(source) -> list:
    """The images `kuiper run --input FOLDER` reads: a labelled folder's by class, else the folder's own."""
    source = Path(source)
    if not source.is_dir():
        raise ImageError(f"{source}: not a folder")
    if accuracy.is_labelled(source):
        return accuracy.labelled_images(source).paths
    return images.find_images(source)


def classify_folder(model, source, actors: int = 1, threads: int = 1, batch: int = BATCH, **options):
    """Every image of folder `source` (a path every node sees) through `actors` actors of `threads` CPUs each,
    `batch` images per forward; `options` go to Classifier. A folder.FolderRun: rows in the folder's order
    (paths made absolute), and the images that could not be read."""
    ray = import_ray()
    paths = [p.resolve() for p in folder_images(source)]
    dataset = ray.data.from_items([{"path": str(p)} for p in paths]).map_batches(
        Classifier, fn_constructor_kwargs={"model": str(model), "threads": threads, "batch": batch, **options},
        batch_size=ROWS_PER_CALL, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=threads)
    done = {Path(r["path"]): folder.Row(Path(r["path"]), list(r["indices"]), list(r["values"]),
                                        None if r["labels"] is None else list(r["labels"]))
            for r in dataset.take_all()}
    run = folder.FolderRun([done[p] for p in paths if p in done], [p for p in paths if p not in done])
    if not run.rows:
        raise ImageError(f"none of the {len(paths)} image(s) could be read")
    return run
