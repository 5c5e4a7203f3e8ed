"""``comprehensive_model_analysis.xml``: the inspection for tools that read XML, beside the JSON of
``results/inspect.json``: the summary, every metric, the architecture, and each table as rows of
attributes. Written with the standard library's ElementTree (no library does this better)."""

from __future__ import annotations

import math
import numbers
import xml.etree.ElementTree as ET

from modelxray.analyzers.inspect.summary import executive_summary


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):  # numpy's too, written as plain numbers
        return "nan" if math.isnan(value) else repr(float(value))
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v) for v in value)
    return str(value)


def _fields(parent: ET.Element, tag: str, mapping: dict) -> ET.Element:
    """``<tag><field name="k">v</field>...</tag>``: names stay values, so any key (a module type, a
    column with spaces) makes well-formed XML; nested mappings nest the same way."""
    node = ET.SubElement(parent, tag)
    for key, value in mapping.items():
        if isinstance(value, dict):
            _fields(node, "group", value).set("name", str(key))
        else:
            ET.SubElement(node, "field", {"name": str(key)}).text = _text(value)
    return node


def render_xml(name: str, result) -> str:
    root = ET.Element("model_analysis", {"model": name, "tool": "modelxray"})
    summary = ET.SubElement(root, "summary")
    for line in executive_summary(result):
        ET.SubElement(summary, "line").text = line
    metrics = ET.SubElement(root, "metrics")
    for key, value in result.metrics.items():
        ET.SubElement(metrics, "metric", {"name": key, "value": _text(value)})
    _fields(root, "architecture", result.data.get("architecture", {}))
    tables = ET.SubElement(root, "tables")
    for tname, rows in result.tables.items():
        table = ET.SubElement(tables, "table", {"name": tname})
        for row in rows or []:
            _fields(table, "row", row)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
