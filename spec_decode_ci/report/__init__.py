"""``spec-decode-ci report``: results files (``spec_decode_ci.results``) as Buildkite annotations, compared with
a baseline run (``compare``), written through a Jinja template (``markdown``), handed to ``buildkite-agent``
(``agent``), or drawn as a trend over many runs (``history``)."""
