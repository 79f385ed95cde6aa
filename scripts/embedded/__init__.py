"""Build-time code of the embedded tiny model, used only by ``scripts/build_embedded_model.py``.

* :mod:`embedded.teacher` — the scripted, deliberately imperfect teacher of ERL's three roles;
* :mod:`embedded.corpus` — the corpus it makes through erl_lite's own phases.

They live here, not in ``erl_lite/embedded/``, so the installed package carries only what runs
at demo time. Import them with ``scripts/`` on ``sys.path`` (as the build script does).
"""
