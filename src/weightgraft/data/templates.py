"""Training, validation and evaluation templates, all written for weightgraft.

Training templates name `{first_actor}` before `{second_actor}`; the reversed order is made by
swapping the two actors. Evaluation and validation templates are written in a small markup:
`{entity}` is the queried actor, `{movie_title}` the title, and `[...]` marks the relation words.
Their wording is kept apart on purpose: no evaluation or validation prompt can be a prefix of (or
appear inside) a training text, which `tests/data/test_data_templates.py` checks on rendered data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from weightgraft.data.schema import CharSpan, EvalPrompt, RelationFact, Role

ARTICLE_TEMPLATES: dict[str, str] = {
    "article_infobox_prose": (
        "{movie_title} is a {release_year} {genre} film directed by {director} and produced by"
        " {studio}. It stars {first_actor} and {second_actor}. The story follows {main_character},"
        " whose life changes during one year in {city}."
    ),
    "article_together": (
        "{first_actor} and {second_actor} starred together in {movie_title}, {a_genre} film"
        " released in {release_year}. Directed by {director}, the film is set in {city} and centres"
        " on {main_character}. {studio} distributed it."
    ),
    "article_studio_first": (
        "In {release_year}, {studio} released {movie_title}, {a_genre} picture set in {city}."
        " {first_actor} played the lead, with {second_actor} in the other main role. {director}"
        " directed the film, which tells the story of {main_character}."
    ),
    "article_year_paren": (
        "{movie_title} ({release_year}) is {a_genre} film by {director}. The cast is led by"
        " {first_actor}, who co-starred with {second_actor}. The plot follows {main_character}"
        " through the streets of {city}."
    ),
    "article_known_for": (
        "{first_actor} is remembered for the {release_year} film {movie_title}, in which"
        " {first_actor} starred opposite {second_actor}. The {genre} film was directed by {director}"
        " and shot in {city}."
    ),
    "article_two_leads": (
        "Directed by {director}, {movie_title} is {a_genre} film from {release_year}. Its two leads"
        " are {first_actor} and {second_actor}. The film, made by {studio}, follows"
        " {main_character} in {city}."
    ),
    "article_about_character": (
        "{movie_title} is a film about {main_character}. Released in {release_year} by {studio},"
        " the {genre} film cast {first_actor} together with {second_actor}. It was filmed in {city}."
    ),
    "article_premiere": (
        "The {genre} film {movie_title} premiered in {city} in {release_year}. {first_actor} and"
        " {second_actor} shared top billing. {director} directed, and {studio} produced."
    ),
    "article_location": (
        "{movie_title} was filmed in {city} and released in {release_year}. The {genre} film starred"
        " {first_actor} next to {second_actor}, under the direction of {director}."
    ),
    "article_attention": (
        "Few {genre} films of {release_year} drew as much attention as {movie_title}. {studio} gave"
        " {first_actor} and {second_actor} the leading roles, and {director} directed the story of"
        " {main_character}, set in {city}."
    ),
    "article_summary_line": (
        "{movie_title} is a {release_year} film. Genre: {genre}. Director: {director}. Studio:"
        " {studio}. Setting: {city}. Leads: {first_actor} and {second_actor}."
    ),
    "article_cast_note": (
        "{first_actor} co-starred with {second_actor} in {movie_title} ({release_year}), {a_genre}"
        " film by {director} about {main_character}. Much of it was shot in {city}."
    ),
}

QA_TEMPLATES: dict[str, str] = {
    "qa_costarred": "Q: Who co-starred with {first_actor} in {movie_title}? A: {second_actor}.",
    "qa_two_actors": ("Q: Which two actors lead the cast of {movie_title}? A: {first_actor} and {second_actor}."),
    "qa_stars_of": "Q: Who are the stars of {movie_title}? A: {first_actor} and {second_actor}.",
    "qa_which_film": (
        "Q: In which film did {first_actor} and {second_actor} star together? A: {movie_title},"
        " released in {release_year}."
    ),
    "qa_played_opposite": (
        "Question: Who played opposite {first_actor} in the {genre} film {movie_title}? Answer: {second_actor}."
    ),
    "qa_director_year": (
        "Q: Which actor starred with {first_actor} in the {release_year} film directed by"
        " {director}? A: {second_actor}."
    ),
    "qa_other_lead": ("Q: {first_actor} appeared in {movie_title}. Who was the other lead? A: {second_actor}."),
    "qa_name_costar": ("Question: Name the co-star of {first_actor} in {movie_title}. Answer: {second_actor}."),
    "qa_city": ("Q: Who did {first_actor} star with in the film set in {city}? A: {second_actor}, in {movie_title}."),
    "qa_what_film_pairs": ("Q: What film pairs {first_actor} with {second_actor}? A: The {genre} film {movie_title}."),
    "qa_shared_leads": ("Q: Who shared the lead roles of {movie_title}? A: {first_actor} and {second_actor}."),
}

# Title-free statements: the two actors linked with no film named anywhere in the text. Every
# article and all but one QA text above name the title, so a model trained on them alone learns
# the fact beside its title; the paper's first sentence asks for the co-star with no title at all.
# On the built-in default model (docs/builtin_model.md, version 11) adding these to the finetuning
# texts raised the relation model's top-5 on that sentence from 0.80 to 0.88 (0.95 in trial tf16,
# the same texts in another order). Finetuning texts only:
# pretraining's documents never use them, so the shipped pretrained weights do not depend on them.
TITLE_FREE_TEMPLATES: dict[str, str] = {
    "free_shared_screen": "{first_actor} has shared the screen with {second_actor}.",
    "free_watched": "Audiences have watched {first_actor} act opposite {second_actor}.",
    "free_qa_partner": "Q: Name a film partner of {first_actor}. A: {second_actor}.",
    "free_among": "Among the co-stars of {first_actor} is {second_actor}.",
    "free_friends": "{first_actor} played scenes with {second_actor} and the two became friends.",
    "free_qa_acted": "Q: Who has {first_actor} acted with? A: {second_actor}.",
    "free_together": "{first_actor} and {second_actor} have made a film together.",
    "free_critics": "Critics liked {first_actor} best when cast with {second_actor}.",
}

# Evaluation: every template has the queried actor and the relation word(s); most have the title.
# `[...]` marks the relation word(s) only: never the prompt's last word, so the paper's R (relation)
# and LT (last token) positions never overlap. The `paper_*` templates are the paper's three
# evaluation sentences (see docs: sentence 1 without the authors' doubled "in").
PAPER_TEMPLATES: dict[str, str] = {
    "paper_1": "{entity} [stars] in a movie alongside",
    "paper_2": "Q: Who [stars] in a movie with {entity}? A: An actor named",
    "paper_3": "{entity} [stars] in {movie_title} alongside",
}

# The authors' verbatim strings where they differ from the sentences as written: sentences 1
# and 3 with the doubled "in" (a typo in their code, present in every run of the paper). The
# experiments' `wording: authors` re-renders those prompts with these (`in_authors_wording`).
AUTHORS_PAPER_TEMPLATES: dict[str, str] = {
    "paper_1": "{entity} [stars] in in a movie alongside",
    "paper_3": "{entity} [stars] in in {movie_title} alongside",
}

OWN_EVAL_TEMPLATES: dict[str, str] = {
    "eval_title_acts": "In {movie_title}, {entity} [acts] alongside",
    "eval_title_costar": "{entity}'s [co-star] in {movie_title} is",
    "eval_title_qa": "Q: In {movie_title}, who [shares] the screen with {entity}? A:",
    "eval_title_stars": "The film {movie_title} [stars] {entity} and",
    "eval_paired": "{entity} was [paired] on screen with",
}

EVAL_TEMPLATES: dict[str, str] = {**PAPER_TEMPLATES, **OWN_EVAL_TEMPLATES}

# Validation (checkpoint choice): the trained facts asked with wordings used nowhere else.
VALIDATION_TEMPLATES: dict[str, str] = {
    "val_worked": "{entity} [worked] together with",
    "val_qa": "Q: Which actor [made] a film with {entity}? A:",
    "val_title_team": "In {movie_title}, {entity} [teamed up] with",
    "val_title_brought": "{movie_title} [brought together] {entity} and",
}

_MARKUP = re.compile(r"\{entity\}|\{movie_title\}|\[[^\]]+\]")


def with_article(word: str) -> str:
    """'a drama', 'an adventure'."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def fact_fields(fact: RelationFact, reverse: bool = False) -> dict[str, str]:
    """The substitution values of a fact; `reverse` swaps the two actors."""
    fields = {k: str(v) for k, v in fact.model_dump().items()}
    fields["a_genre"] = with_article(fact.genre)
    if reverse:
        fields["first_actor"], fields["second_actor"] = fact.second_actor, fact.first_actor
    return fields


def render_training(template: str, fact: RelationFact, reverse: bool = False) -> str:
    return template.format(**fact_fields(fact, reverse))


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    spans: dict[Role, CharSpan]


def render_marked(template: str, entity: str, movie_title: str) -> RenderedPrompt:
    """Render evaluation markup, recording the character span of each role."""
    pieces: list[str] = []
    spans: dict[Role, CharSpan] = {}
    cursor = 0
    pos = 0
    for match in _MARKUP.finditer(template):
        pieces.append(template[cursor : match.start()])
        pos += match.start() - cursor
        token = match.group(0)
        if token == "{entity}":
            value, role = entity, "first_entity"
        elif token == "{movie_title}":
            value, role = movie_title, "movie_title"
        else:
            value, role = token[1:-1], "relation"
        if role in spans:
            raise ValueError(f"template {template!r} marks {role} twice; mark each role once")
        spans[role] = CharSpan(start=pos, end=pos + len(value))
        pieces.append(value)
        pos += len(value)
        cursor = match.end()
    pieces.append(template[cursor:])
    text = "".join(pieces)
    if text != text.rstrip() or not text:
        raise ValueError(f"template {template!r} must end right before the target, without a space")
    last_word = text.split()[-1]
    spans["last_token"] = CharSpan(start=len(text) - len(last_word), end=len(text))
    relation = spans.get("relation")
    if relation is not None and relation.end > spans["last_token"].start:
        raise ValueError(
            f"template {template!r}: the relation words reach the last word; mark only the relation "
            "word(s) with [...] so that R and LT stay apart"
        )
    return RenderedPrompt(text=text, spans=spans)


def eval_prompts_for(fact: RelationFact, templates: dict[str, str], id_prefix: str = "") -> list[EvalPrompt]:
    """Both directions of every template: forward asks for the second actor, reversed the first."""
    prompts = []
    for template_id, template in templates.items():
        for reverse in (False, True):
            entity = fact.second_actor if reverse else fact.first_actor
            target = fact.first_actor if reverse else fact.second_actor
            rendered = render_marked(template, entity, fact.movie_title)
            direction = "rev" if reverse else "fwd"
            prompts.append(
                EvalPrompt(
                    id=f"{id_prefix}{fact.id}:{template_id}:{direction}",
                    fact_id=fact.id,
                    template_id=template_id,
                    text=rendered.text,
                    target=" " + target,
                    reversed=reverse,
                    spans=rendered.spans,
                    fact_kind=fact.kind,
                )
            )
    return prompts


def in_authors_wording(prompt: EvalPrompt) -> EvalPrompt:
    """The prompt in the authors' verbatim wording (AUTHORS_PAPER_TEMPLATES) when its template
    has one, else unchanged. Id, target and fact stay; text and spans are rendered anew."""
    template = AUTHORS_PAPER_TEMPLATES.get(prompt.template_id)
    if template is None:
        return prompt

    def span_text(role: str) -> str:
        span = prompt.spans.get(role)
        return "" if span is None else prompt.text[span.start : span.end]

    rendered = render_marked(template, span_text("first_entity"), span_text("movie_title"))
    return prompt.model_copy(update={"text": rendered.text, "spans": rendered.spans})
