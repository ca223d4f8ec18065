"""The offline backend: BM25 (bm25s + PyStemmer) over the Search-R1 Wikipedia passages.

The corpus is ``<shared>/data/corpus/wiki.jsonl.gz`` in the Search-R1 / FlashRAG format
(``{"id", "contents": '"Title"\\ntext'}``). ``build_index()`` tokenises it once (lower case,
English stop words, Snowball stemmer), builds the bm25s index (method "lucene", k1=1.5, b=0.75)
with vectorised numpy instead of bm25s's per-document loop (same scores, several times faster
at a million passages), saves it under ``DATA_DIR/index`` and skips itself while the corpus is
unchanged. ``LocalIndex.search`` scores one query with bm25s's sparse lookup and takes the top k
with ``argpartition``: well under a millisecond a query on the course corpus.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import Stemmer
from tqdm.auto import tqdm

# bm25s may import jax when it is installed; never let it grab a whole GPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import bm25s  # noqa: E402
from bm25s.tokenization import STOPWORDS_EN  # noqa: E402

from helpers import config  # noqa: E402
from helpers.search.format import MAX_CONTENT_CHARS, cut  # noqa: E402
from helpers.search.http import replace_lone_surrogates  # noqa: E402
from helpers.search.types import SEARCH_TOPK, SearchItem, SearchResult, SearchStats  # noqa: E402

INDEX_VERSION = 2
# same matches as bm25s's (?u)\b\w\w+\b (a greedy run always ends at a boundary), twice as fast
TOKEN_PATTERN = re.compile(r"\w\w+")


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


def _open_corpus(path: Path):
    return (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8")


def read_corpus(path: str | Path) -> list[dict]:
    with _open_corpus(Path(path)) as handle:
        return [json.loads(line) for line in handle if line.strip()]


_THREAD = threading.local()
_STOPWORDS = frozenset(STOPWORDS_EN)


def _analyzer():
    """(stemmer, stop words); one stemmer per thread, PyStemmer objects are not thread-safe."""
    stemmer = getattr(_THREAD, "stemmer", None)
    if stemmer is None:
        stemmer = _THREAD.stemmer = Stemmer.Stemmer("english")
    return stemmer, _STOPWORDS


def analyze(text: str) -> list[str]:
    """The same token stream bm25s builds for the corpus: lower, stop words out, stemmed."""
    stemmer, stopwords = _analyzer()
    words = [w for w in TOKEN_PATTERN.findall(text.lower()) if w not in stopwords]
    return stemmer.stemWords(words)


class CorpusTokenizer:
    """Streams passages into one int32 array of token ids (the analyzer of `analyze`).

    Surface words are stemmed once and cached, so a corpus costs one regex and one dict
    lookup per word; this is what keeps a 1 M-passage corpus within minutes and a few GiB.
    """

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self._word_ids: dict[str, int] = {}
        self._ids = array("i")
        self._lengths = array("i")
        self.stemmer, self.stopwords = _analyzer()

    @property
    def documents(self) -> int:
        return len(self._lengths)

    def _learn(self, words: list[str]) -> None:
        for word in words:
            if word not in self._word_ids:
                if word in self.stopwords:
                    self._word_ids[word] = -1
                else:
                    stem = self.stemmer.stemWord(word)
                    self._word_ids[word] = self.vocab.setdefault(stem, len(self.vocab))

    def add(self, text: str) -> None:
        words = TOKEN_PATTERN.findall(text.lower())
        known = self._word_ids
        try:
            ids = [known[w] for w in words]
        except KeyError:
            self._learn(words)
            ids = [known[w] for w in words]
        ids = [i for i in ids if i >= 0]
        self._ids.extend(ids)
        self._lengths.append(len(ids))

    def arrays(self):
        return np.frombuffer(self._ids, dtype=np.int32), np.frombuffer(self._lengths, dtype=np.int32)


def bm25_from_ids(ids, lengths, vocab: dict[str, int], k1: float = 1.5, b: float = 0.75):
    """A bm25s.BM25 (method 'lucene') built with numpy only, equal to ``BM25().index(...)``.

    bm25s scores documents one by one in Python; here the (term, document) pairs are counted
    and scored as whole arrays and laid out column-wise (CSC) exactly as bm25s stores them.
    """
    vocab = dict(vocab)
    vocab.setdefault("", len(vocab))  # bm25s's empty token, so empty queries still score
    n_docs, n_vocab = len(lengths), len(vocab)
    # sort by (term, document): the CSC order; counts of equal pairs are the term frequencies
    keys = ids.astype(np.int64)
    keys *= n_docs
    keys += np.repeat(np.arange(n_docs, dtype=np.int32), lengths)  # the document of each token
    keys.sort(kind="stable")
    boundary = np.empty(len(keys), dtype=bool)
    if len(keys):
        boundary[0] = True
        np.not_equal(keys[1:], keys[:-1], out=boundary[1:])
    starts = np.flatnonzero(boundary)
    del boundary
    pairs = keys[starts]
    del keys
    tf = np.diff(np.append(starts, len(ids))).astype(np.float32)
    del starts
    term = (pairs // n_docs).astype(np.int32)
    doc = (pairs % n_docs).astype(np.int32)
    del pairs
    df = np.bincount(term, minlength=n_vocab)
    idf = np.zeros(n_vocab, dtype=np.float32)
    seen = df > 0
    idf[seen] = np.log(1 + (n_docs - df[seen] + 0.5) / (df[seen] + 0.5))
    avg_len = float(lengths.mean()) if n_docs else 1.0
    norm = (k1 * ((1 - b) + b * lengths[doc].astype(np.float64) / avg_len)).astype(np.float32)
    data = idf[term] * (tf / (norm + tf))
    del norm, tf
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
    retriever.scores = {"data": data.astype(np.float32), "indices": doc, "indptr": indptr, "num_docs": n_docs}
    retriever.vocab_dict = vocab
    retriever.unique_token_ids_set = set(vocab.values())
    retriever.nonoccurrence_array = None  # only bm25l / bm25+ use it
    return retriever


def _fingerprint(path: Path) -> dict:
    stat = path.stat()
    return {"corpus": str(path.resolve()), "size": stat.st_size, "mtime": int(stat.st_mtime),
            "version": INDEX_VERSION}


def build_index(corpus: str | Path | None = None, index_dir: str | Path | None = None,
                force: bool = False, show_progress: bool = True) -> Path:
    """Tokenise and index the corpus once; a later call with the same corpus returns at once."""
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
    tokenizer = CorpusTokenizer()
    # one streaming pass: copy the passages beside the index, keep only token ids (int32)
    with _open_corpus(corpus) as source, (index_dir / "passages.jsonl").open("w", encoding="utf-8") as target:
        for line in tqdm(source, desc="tokenise passages", unit=" passages", mininterval=1.0,
                         disable=not show_progress):
            if line.strip():
                row = json.loads(line)
                contents = replace_lone_surrogates(row["contents"])  # a "\\ud83d" escape no tokenizer takes
                tokenizer.add(contents)
                target.write(json.dumps({"id": row["id"], "contents": contents}, ensure_ascii=False) + "\n")
    count = tokenizer.documents
    retriever = bm25_from_ids(*tokenizer.arrays(), tokenizer.vocab)
    del tokenizer
    retriever.save(str(index_dir), show_progress=False)
    seconds = time.perf_counter() - started
    manifest.write_text(json.dumps({"fingerprint": _fingerprint(corpus), "passages": count,
                                    "seconds": round(seconds, 2)}, indent=2) + "\n")
    print(f"    indexed {count:,} passages in {seconds:.1f}s -> {index_dir}")
    return index_dir


def require_index(index_dir: str | Path | None = None) -> Path:
    """The index folder, or `config.SetupRequired` saying how to build it."""
    index_dir = Path(index_dir) if index_dir else default_index_dir()
    if not (index_dir / "manifest.json").exists():
        raise config.SetupRequired(f"no search index in {index_dir}: run {config.SETUP_COMMAND}, which builds it")
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
        index_dir = require_index(index_dir)
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
        tokenizer = CorpusTokenizer()
        contents = [replace_lone_surrogates(row["contents"]) for row in rows]
        for text in contents:
            tokenizer.add(text)
        retriever = bm25_from_ids(*tokenizer.arrays(), tokenizer.vocab)
        passages = [Passage(r["id"], *split_contents(text)) for r, text in zip(rows, contents)]
        return cls(retriever, passages)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = SEARCH_TOPK) -> list[Passage]:
        """Top-k passages with a positive score, best first (empty when no word matches)."""
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
                      source="Wikipedia (offline, Dec 2018)", url=wikipedia_url(passage.title),
                      passage_id=passage.id)


class LocalSearchClient:
    """The default backend: no network, no key, deterministic."""

    name = "local"

    def __init__(self, index: LocalIndex | None = None, *, topk: int = SEARCH_TOPK,
                 max_chars: int = MAX_CONTENT_CHARS, index_dir: str | Path | None = None):
        if index is None:  # a missing index stops the run here, before any rollout searches
            require_index(index_dir)
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
