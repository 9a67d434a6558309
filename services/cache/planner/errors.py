"""The planner's one error type: bad pipeline input, located in the document."""

from __future__ import annotations

from gpufair.common.errors import InvalidArgument


class PipelineError(InvalidArgument):
    """Malformed or unsupported pipeline YAML, with where and what was expected.

    The message reads `file:line:col: path.in.doc: what was wrong`, so the CLI
    prints it as is and the gRPC layer maps it to INVALID_ARGUMENT.
    """

    def __init__(
        self,
        source: str,
        path: str,
        problem: str,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.source = source
        self.path = path
        self.problem = problem
        self.line = line
        self.column = column
        where = source
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        prefix = f"{where}: {path}: " if path else f"{where}: "
        super().__init__(prefix + problem)
