"""What the benchmark scripts share: results and timing (``common``), generated data
(``data``), running scripts as time-boxed parts (``parts``), the CUDA tests' outcome log
(``outcome_log``) and the object-storage peers (``streaming_peers``)."""
