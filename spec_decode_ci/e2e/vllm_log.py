"""vLLM's log lines that match, kept while inside: what vLLM said of its choices at an engine's start."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def vllm_log_lines(matches: Callable[[str], bool]) -> Iterator[list[str]]:
    """Inside: every message of vLLM's loggers (INFO and above) for which ``matches`` holds, in order."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if matches(message):
                lines.append(message)

    logger, handler = logging.getLogger("vllm"), Keep(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
