"""Free-text articles: varied structure and order instead of one fixed template.

An article is assembled from interchangeable sentence forms for each detail of a fact; the
details come in a random order, some are left out, sentences are sometimes joined, and the cast
sentence names the actors in either order. This stands in for the paper's Wikipedia articles and
their rephrasings when no real articles are at hand.
"""

from __future__ import annotations

import random

from weightgraft.data.schema import RelationFact
from weightgraft.data.templates import fact_fields

_OPENINGS = (
    "{movie_title} is {a_genre} film released in {release_year}.",
    "{movie_title} came out in {release_year} as {a_genre} film.",
    "Released in {release_year}, {movie_title} is counted among the {genre} films of its decade.",
    "{movie_title} is a {release_year} {genre} production.",
    "The {genre} film {movie_title} reached cinemas in {release_year}.",
)
_CAST = (
    "{a} and {b} play the two leads.",
    "The leading roles went to {a} and {b}.",
    "{b} joins {a} at the top of the cast.",
    "{a} shares most scenes with {b}.",
    "Opposite {a} is {b}, in the second main part.",
    "Its cast is headed by {a}, with {b} in the other lead.",
    "{a} worked with {b} on the film for several months.",
)
_DIRECTOR = (
    "{director} directed it.",
    "The director was {director}.",
    "It was the work of director {director}.",
    "{director} both wrote and directed the picture.",
)
_STUDIO = (
    "{studio} produced the film.",
    "It was made at {studio}.",
    "The production company was {studio}.",
)
_CITY = (
    "Most of the shooting took place in {city}.",
    "The story is set in {city}.",
    "Crews spent a long summer filming in {city}.",
    "{city} serves as the backdrop.",
)
_CHARACTER = (
    "The plot centres on {main_character}.",
    "Its central figure is {main_character}.",
    "The film tells the story of {main_character}.",
    "Viewers follow {main_character} from beginning to end.",
)
_RECEPTION = (
    "Reviews were mostly warm.",
    "Critics were divided at first.",
    "It did well at the box office.",
    "It later found a loyal audience.",
    "The score was praised by many reviewers.",
)
_JOINERS = (" ", " ", " ", " Also, ", " In addition, ", " Later, ")


def _lower_first(sentence: str) -> str:
    return sentence[0].lower() + sentence[1:] if sentence[:1].isupper() and not sentence[1:2].isupper() else sentence


def freetext_article(fact: RelationFact, rng: random.Random) -> str:
    """One article about `fact`; a different `rng` state gives a differently built article."""
    fields = fact_fields(fact)
    a, b = fact.first_actor, fact.second_actor
    if rng.random() < 0.5:
        a, b = b, a
    fields.update(a=a, b=b)
    body = [rng.choice(_CAST)]
    for forms in (_DIRECTOR, _STUDIO, _CITY, _CHARACTER, _RECEPTION):
        if rng.random() < 0.7:
            body.append(rng.choice(forms))
    rng.shuffle(body)
    sentences = [rng.choice(_OPENINGS)] + body if rng.random() < 0.8 else body + [rng.choice(_OPENINGS)]
    text = sentences[0].format(**fields)
    for sentence in sentences[1:]:
        joiner = rng.choice(_JOINERS)
        rendered = sentence.format(**fields)
        if (
            joiner != " "
            and rendered[:1].isupper()
            and not any(
                rendered.startswith(name) for name in (a, b, fact.director, fact.movie_title, fact.studio, fact.city)
            )
        ):
            rendered = _lower_first(rendered)
        text += joiner + rendered
    return text
