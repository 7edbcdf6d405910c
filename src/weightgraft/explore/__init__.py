"""`weightgraft explore`: graft interactively in a browser.

`session` is the state and compute (no web), with `prompt_encoder` (a prompt's tokens and roles),
`model_lock` (one model call at a time) and `lru` (its bounded memos), `grid` the cells and their Grafts, `compare` the
table of pinned grafts, `tokens` a token as the page shows it, `export` the Python and run-config
text of a graft, `page_requests` what a request may hold, `api` the ASGI app,
`server` uvicorn around it; `static/` is the page (plain HTML, CSS and one JS file).
"""

from weightgraft.explore.export import ModelNames
from weightgraft.explore.session import ExploreSession

__all__ = ["ExploreSession", "ModelNames"]
