"""docs/configuration.md is generated from the config models and checked fresh; every key has a description."""

from __future__ import annotations

from stacktest import ROOT

from gpustack import __main__ as cli
from gpustack import ci_examples, config_descriptions, docs, graph, security, stack_schema


def test_the_committed_reference_is_what_the_models_generate():
    assert not docs.stale(), "docs/configuration.md is stale: run `python -m gpustack docs` and commit the page"


def test_docs_check_exits_1_on_a_stale_page_and_writes_nothing(tmp_path, monkeypatch, capsys):
    page = tmp_path / "configuration.md"
    page.write_text("# hand-edited\n")
    monkeypatch.setattr(docs, "PAGE", page)
    # the pages rendered from stacks (the concepts graph, the CI example, security) have freshness tests of their own
    for module, is_stale, write in ((graph, "concepts_stale", "write_concepts"), (ci_examples, "stale", "write"),
                                    (security, "stale", "write")):
        monkeypatch.setattr(module, is_stale, lambda path: False)
        monkeypatch.setattr(module, write, lambda path: False)
    assert cli.main(["docs", "--check"]) == 1
    assert "stale" in capsys.readouterr().out
    assert page.read_text() == "# hand-edited\n"
    assert cli.main(["docs"]) == 0 and cli.main(["docs", "--check"]) == 0
    assert page.read_text() == docs.render()


def test_every_key_has_a_description_from_its_model_or_the_reference_text():
    schema = stack_schema.config_schema()
    missing = [path for path, node, _ in stack_schema.walk(schema) if not node.get("description")]
    assert not missing, (
        "keys without a description: give the field Field(description=...) in components/config/, "
        f"or add it to gpustack/config_descriptions.py: {missing}"
    )


def test_the_reference_text_names_only_keys_the_models_have_and_none_they_describe_themselves():
    paths = {path: node for path, node, _ in stack_schema.walk(stack_schema.model_schema())}
    unknown = sorted(set(config_descriptions.DESCRIPTIONS) - set(paths))
    assert not unknown, f"gpustack/config_descriptions.py describes keys StackConfig does not have: {unknown}"
    shadowed = sorted(path for path in config_descriptions.DESCRIPTIONS if stack_schema.model_description(paths[path]))
    assert not shadowed, f"these keys' models describe them now; remove their entries from gpustack/config_descriptions.py: {shadowed}"


def test_the_page_lists_every_key_with_type_default_and_allowed_values():
    page = docs.render()
    schema = stack_schema.config_schema()
    for path, node, _ in stack_schema.walk(schema):
        if path in schema["properties"] and "properties" in node:
            assert f"\n## `gpu-stack:{path}`\n" in page, path  # a section: its keys are the rows
        else:
            assert f"| `{docs.placeholder_path(path, schema)}` |" in page, path
    # A block every operand shares is listed once, under a placeholder naming all of them.
    assert "| `operands.<operand>.env[].name` | string | **required** |" in page
    assert "| `operands.driver.env` |" not in page
    assert "operand is one of: `driver`, `driverManager`, `toolkit`" in page
    assert "| `cluster.name` | string | **required** | at most 63 characters;" in page
    assert "| `validation.timeoutSeconds` | integer | `900` | 60 … 7200 |" in page
    assert "| `nodePools[].sharing.strategy` | string | `none` | `none` \\| `time-slicing` \\| `mps` \\| `mig-single` \\| `mig-mixed` |" in page
    assert "| `registryPassword` | string, **secret** |" in page
    assert "`A100-80GB`" in page  # catalogs supply enums the types do not


def test_the_page_shows_the_editor_line_for_stack_files():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert stack_schema.MODELINE in page
