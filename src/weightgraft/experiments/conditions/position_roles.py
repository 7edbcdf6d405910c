"""Position expressions by entity role (FE, M, R, LT, `other`, unions, complements).

The parser and evaluator live in the engine (`weightgraft.engine.roles`), so that a `Graft` of
the Python API (`Graft(positions="FE+LT")`) and a run config's condition read one grammar with
one implementation; the condition language imports them from here.
"""

from weightgraft.engine.roles import ATOMS, ROLE_OF_ATOM, NotApplicable, PositionExpr, parse_positions

__all__ = ["ATOMS", "ROLE_OF_ATOM", "NotApplicable", "PositionExpr", "parse_positions"]
