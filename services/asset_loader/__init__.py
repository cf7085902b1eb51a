"""The asset loader: skills, commands, workflows and the skill graph of a project (seeds 000, 001).

Pure cores: ``safe_yaml``, ``text``, ``loaders.*``, ``generation.compile_generation``,
``hooks``, ``store`` queries. I/O: ``discover`` (reading layers), ``watcher``, ``service``.
See ``docs/assets.md``.
"""
