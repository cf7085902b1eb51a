"""The tool runner: the single execution path of every tool call (seed 000 ``ToolRunner``)."""
