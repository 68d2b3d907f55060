"""Requests that arrive together are translated together: `Batcher` is one worker thread over a queue of texts.

It takes what is queued, waiting up to `max_wait` seconds for each next request, up to `max_batch` texts and
`max_tokens` source tokens padded to the batch's longest text (fairseq's `--max-tokens` budget: a batch of long
texts holds fewer of them), and answers every request of that batch. A request that would pass either limit
starts the next batch; one that passes them alone is a batch of its own (requests are never split). The generic
model has one batcher for every direction (one forward, one beam search, each example through its own languages'
modules); CTranslate2 has one per direction (a model each).
At most `max_queue` texts wait: a request that would pass it is refused at once (`QueueFull`: the server answers
503 with Retry-After) rather than waiting without bound. A request abandoned before its batch starts (its client's
timeout) is dropped from the batch instead of being translated for nobody.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

logger = logging.getLogger(__name__)
Job = tuple[list[str], list[str], Future, int]  # directions, texts, their future, the longest text's tokens


class QueueFull(RuntimeError):
    """More texts than `max_queue` would wait: the server answers 503 with Retry-After."""


class Batcher:
    """One worker thread that joins the texts of requests queued together into one batch and translates them with
    `translate(directions, texts)` (one direction per text), calling `on_batch(texts, seconds)` after each batch."""

    def __init__(self, translate: Callable[[list[str], list[str]], list[str]], name: str, max_batch: int = 32,
                 max_wait: float = 0.005, max_queue: int = 1024,
                 on_batch: Callable[[int, float], None] | None = None, max_tokens: int | None = None):  # fmt: skip
        if max_batch < 1 or not max_wait >= 0:  # a batch of 0 would never be taken; a negative wait raises later
            raise ValueError(f"max_batch={max_batch} must be at least 1 and max_wait={max_wait} at least 0 seconds.")
        if max_queue < max_batch:
            raise ValueError(f"max_queue={max_queue} must be at least max_batch={max_batch} (a full batch must fit).")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be at least 1 (or None: no token budget).")
        self.translate, self.name, self.on_batch = translate, name, on_batch
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait, max_queue
        self.max_tokens = max_tokens
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self._held: Job | None = None  # taken from the queue but over the last batch's limits: starts the next
        self._waiting, self._count_lock = 0, threading.Lock()
        self.thread = threading.Thread(target=self._work, name=f"batcher-{name}", daemon=True)
        self.thread.start()

    @property
    def waiting(self) -> int:
        """Texts queued and not yet in a batch."""
        return self._waiting

    def submit(self, directions: list[str], texts: list[str], tokens: list[int] | None = None) -> Future:
        """Queue texts (one direction each, `tokens` their source lengths for the token budget); the future gets
        their translations in order. Raises `QueueFull`."""
        with self._count_lock:
            if self._waiting + len(texts) > self.max_queue:
                raise QueueFull(f"{self._waiting} texts are waiting for {self.name}, at most {self.max_queue} may")
            self._waiting += len(texts)
        future: Future = Future()
        self.queue.put((directions, texts, future, max(tokens, default=0) if tokens else 0))
        return future

    def close(self) -> None:
        """Translate what is queued, then stop the worker."""
        self.queue.put(None)
        self.thread.join()

    def _taken(self, job: Job) -> None:
        with self._count_lock:
            self._waiting -= len(job[1])

    def _fits(self, jobs: list[Job], job: Job) -> bool:
        """Whether `job` joins `jobs` within the batch's limits (texts, and padded source tokens)."""
        texts = sum(len(j[1]) for j in jobs) + len(job[1])
        if texts > self.max_batch:
            return False
        return self.max_tokens is None or texts * max(job[3], *(j[3] for j in jobs)) <= self.max_tokens

    def _work(self) -> None:
        while (first := self._held or self.queue.get()) is not None:
            self._taken(first)
            self._held, jobs, stop = None, [first], False
            while True:  # what arrives within max_wait of the last request joins this batch, while it fits
                try:
                    job = self.queue.get(timeout=self.max_wait)
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                if not self._fits(jobs, job):
                    self._held = job  # the next batch starts with it (still counted as waiting)
                    break
                self._taken(job)
                jobs.append(job)
            self._run([job for job in jobs if job[2].set_running_or_notify_cancel()])  # cancelled: nobody waits
            if stop:  # nothing is held: a held request ends the wait before the stop is read
                return

    def _run(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        directions = [direction for job in jobs for direction in job[0]]
        texts = [text for job in jobs for text in job[1]]
        started = time.perf_counter()
        try:
            outputs = self.translate(directions, texts)
        except Exception as error:  # the requests of this batch fail; the worker keeps serving
            logger.exception("translation of %d texts (%s) failed", len(texts), self.name)
            for job in jobs:
                job[2].set_exception(error)
            return
        if self.on_batch is not None:
            self.on_batch(len(texts), time.perf_counter() - started)
        start = 0
        for _, job_texts, future, _ in jobs:
            future.set_result(outputs[start : start + len(job_texts)])
            start += len(job_texts)


__all__ = ["Batcher", "QueueFull"]
