"""One column of ``kubectl get``: an entry of a CRD's ``additionalPrinterColumns``, a Table column.

The CRDs are rendered with these columns, and the local API server reads them back from a stored
CRD (and states its built-in kinds' columns the same way) to answer ``kubectl get`` with a Table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict


class RawPrinterColumn(TypedDict, total=False):
    """A CRD's ``additionalPrinterColumns`` entry, as the API server reads it."""

    name: str
    type: str
    jsonPath: str
    description: str
    format: str
    priority: int


@dataclass(frozen=True)
class PrinterColumn:
    """A column: its header, its type, a simple JSONPath into the object, and what it shows.

    ``priority`` above 0 shows the column only under ``-o wide``; ``format`` refines the type
    (``name`` marks the column that holds the object's name).
    """

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""

    def to_crd(self) -> RawPrinterColumn:
        """The column as a CRD's ``additionalPrinterColumns`` entry."""
        column: RawPrinterColumn = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.format:
            column["format"] = self.format
        if self.priority:
            column["priority"] = self.priority
        return column
