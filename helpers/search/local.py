"""The offline backend: BM25 (bm25s + PyStemmer) over the Search-R1 Wikipedia passages.

The corpus is ``<shared>/data/corpus/wiki.jsonl.gz`` in the Search-R1 / FlashRAG format
(``{"id", "contents": '"Title"\\ntext'}``). ``build_index()`` tokenises it once (lower case,
English stop words, Snowball stemmer), saves the bm25s index under ``DATA_DIR/index`` and
skips itself while the corpus is unchanged. ``LocalIndex.search`` scores one query with a
sparse dot product and takes the top k with ``argpartition``: about a millisecond a query.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

# bm25s may import jax when it is installed; never let it grab a whole GPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from helpers import config  # noqa: E402
from helpers.search.format import MAX_CONTENT_CHARS, cut  # noqa: E402
from helpers.search.types import SearchItem, SearchResult, SearchStats  # noqa: E402

INDEX_VERSION = 1
TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float = 0.0

    @property
    def contents(self) -> str:
        return f'"{self.title}"\n{self.text}'


def corpus_path() -> Path:
    return config.shared_dir() / "data" / "corpus" / "wiki.jsonl.gz"


def default_index_dir() -> Path:
    return config.DATA_DIR / "index"


def split_contents(contents: str) -> tuple[str, str]:
    """'"Title"\\ntext' -> (Title, text); a passage without a title line keeps ''."""
    head, sep, tail = contents.partition("\n")
    if not sep:
        return "", contents.strip()
    return head.strip().strip('"').strip(), tail.strip()


def read_corpus(path: str | Path) -> list[dict]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@lru_cache(maxsize=1)
def _analyzer():
    import Stemmer
    from bm25s.tokenization import STOPWORDS_EN

    return Stemmer.Stemmer("english"), frozenset(STOPWORDS_EN)


def analyze(text: str) -> list[str]:
    """The same token stream bm25s builds for the corpus: lower, stop words out, stemmed."""
    stemmer, stopwords = _analyzer()
    words = [w for w in TOKEN_PATTERN.findall(text.lower()) if w not in stopwords]
    return stemmer.stemWords(words)


def _fingerprint(path: Path) -> dict:
    stat = path.stat()
    return {"corpus": str(path.resolve()), "size": stat.st_size, "mtime": int(stat.st_mtime),
            "version": INDEX_VERSION}


def build_index(corpus: str | Path | None = None, index_dir: str | Path | None = None,
                force: bool = False, show_progress: bool = True) -> Path:
    """Tokenise and index the corpus once; a later call with the same corpus returns at once."""
    import bm25s

    corpus = Path(corpus) if corpus else corpus_path()
    index_dir = Path(index_dir) if index_dir else default_index_dir()
    if not corpus.exists():
        raise FileNotFoundError(
            f"corpus {corpus} not found: set COURSE_SHARED to the offline pack, or build one with "
            "`python -m helpers.data download --out DIR`.")
    manifest = index_dir / "manifest.json"
    if manifest.exists() and not force and json.loads(manifest.read_text()).get("fingerprint") == _fingerprint(corpus):
        print(f"    index up to date in {index_dir}")
        return index_dir
    started = time.perf_counter()
    index_dir.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)  # an interrupted build must not look finished
    # one pass: copy the passages beside the index and keep only the texts to tokenise
    texts: list[str] = []
    opener = gzip.open if corpus.suffix == ".gz" else open
    with opener(corpus, "rt", encoding="utf-8") as source, \
            (index_dir / "passages.jsonl").open("w", encoding="utf-8") as target:
        for line in source:
            if line.strip():
                row = json.loads(line)
                texts.append(row["contents"])
                target.write(json.dumps({"id": row["id"], "contents": row["contents"]}, ensure_ascii=False) + "\n")
    stemmer, _ = _analyzer()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=show_progress)
    count = len(texts)
    del texts
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=show_progress)
    del tokens
    retriever.save(str(index_dir), show_progress=False)
    seconds = time.perf_counter() - started
    manifest.write_text(json.dumps({"fingerprint": _fingerprint(corpus), "passages": count,
                                    "seconds": round(seconds, 2)}, indent=2) + "\n")
    print(f"    indexed {count:,} passages in {seconds:.1f}s -> {index_dir}")
    return index_dir


class LocalIndex:
    """A loaded BM25 index and its passages; thread-safe searches."""

    def __init__(self, retriever, passages: list[Passage]):
        self.retriever = retriever
        self.passages = passages
        self._vocab = retriever.vocab_dict
        self._lock = threading.Lock()

    @classmethod
    def load(cls, index_dir: str | Path | None = None) -> "LocalIndex":
        import bm25s

        index_dir = Path(index_dir) if index_dir else default_index_dir()
        if not (index_dir / "manifest.json").exists():
            raise FileNotFoundError(f"no search index in {index_dir}: run `make setup` "
                                    "(or `python -c 'from helpers.search.local import build_index; build_index()'`).")
        retriever = bm25s.BM25.load(str(index_dir), show_progress=False)
        passages = []
        with (index_dir / "passages.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                title, text = split_contents(row["contents"])
                passages.append(Passage(row["id"], title, text))
        return cls(retriever, passages)

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "LocalIndex":
        """An in-memory index (tests, small corpora); rows in the Search-R1 corpus format."""
        import bm25s

        stemmer, _ = _analyzer()
        tokens = bm25s.tokenize([r["contents"] for r in rows], stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        passages = [Passage(r["id"], *split_contents(r["contents"])) for r in rows]
        return cls(retriever, passages)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """Top-k passages with a positive score, best first (empty when no word matches)."""
        import numpy as np

        ids = [self._vocab[t] for t in analyze(query) if t in self._vocab]
        if not ids or k <= 0:
            return []
        with self._lock:
            scores = self.retriever.get_scores_from_ids(ids)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [
            Passage(p.id, p.title, p.text, float(scores[i]))
            for i in top if scores[i] > 0 for p in (self.passages[int(i)],)
        ]


_INDEX: LocalIndex | None = None
_INDEX_LOCK = threading.Lock()


def get_index(index_dir: str | Path | None = None) -> LocalIndex:
    """The default index, loaded once per process (about a second)."""
    global _INDEX
    with _INDEX_LOCK:
        if _INDEX is None or index_dir is not None:
            loaded = LocalIndex.load(index_dir)
            if index_dir is not None:
                return loaded
            _INDEX = loaded
        return _INDEX


def wikipedia_url(title: str) -> str:
    return "https://en.wikipedia.org/wiki/" + quote(title.replace(" ", "_")) if title else ""


def passage_to_item(passage: Passage, max_chars: int = MAX_CONTENT_CHARS) -> SearchItem:
    return SearchItem(title=passage.title or "Untitled", content=cut(passage.text, max_chars),
                      source="Wikipedia (offline, Dec 2018)", url=wikipedia_url(passage.title))


class LocalSearchClient:
    """The default backend: no network, no key, deterministic."""

    name = "local"

    def __init__(self, index: LocalIndex | None = None, *, topk: int = 3,
                 max_chars: int = MAX_CONTENT_CHARS, index_dir: str | Path | None = None):
        self._index = index
        self._index_dir = index_dir
        self.topk = topk
        self.max_chars = max_chars
        self.stats = SearchStats()

    @property
    def index(self) -> LocalIndex:
        if self._index is None:
            self._index = get_index(self._index_dir)
        return self._index

    def __repr__(self) -> str:
        return f"LocalSearchClient(topk={self.topk}, max_chars={self.max_chars})"

    def search(self, query: str) -> SearchResult:
        started = time.perf_counter()
        try:
            passages = self.index.search(str(query), k=self.topk)
            items = [passage_to_item(p, self.max_chars) for p in passages]
            result = SearchResult(ok=True, items=items, latency=time.perf_counter() - started, status=200)
        except Exception as exc:  # never raise into a rollout
            result = SearchResult(ok=False, items=[], latency=time.perf_counter() - started,
                                  error=f"local index error: {type(exc).__name__}: {exc}")
        self.stats.record(result)
        return result
