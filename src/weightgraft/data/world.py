"""The generated world the built-in model is pretrained on.

Known films are a seeded subset of our real films (the "real" entities). The world describes them
in articles, QA lines, free-text articles and biographies. For a seeded share of the films (the
"exposed" films) it also states the co-star fact in the evaluation and validation wordings, so the
model learns that a fact read in an article can be asked in those words; the remaining "held-out"
films are never stated in those wordings, and the world accuracy is measured on them.
Background sentences use every pooled name and title word, so no name token is new to the model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from weightgraft.data import words
from weightgraft.data.facts import known_film_facts, select_known_films
from weightgraft.data.freetext import freetext_article
from weightgraft.data.names import NameFactory, NamePool
from weightgraft.data.schema import RelationFact
from weightgraft.data.templates import (
    ARTICLE_TEMPLATES,
    EVAL_TEMPLATES,
    QA_TEMPLATES,
    VALIDATION_TEMPLATES,
    render_marked,
    render_training,
    with_article,
)

# The pretraining mixture, as cumulative bounds on one uniform roll per document (the share of
# each kind in brackets). These exact numbers fix the built-in world's bytes: change them and the
# built-in models change.
MIX_ARTICLES = 0.20  # templated articles about a film [20%]
MIX_QA = 0.42  # templated questions and answers [22%]
MIX_FREETEXT = 0.52  # free-text articles [10%]
MIX_EVAL_PROMPTS = 0.80  # evaluation-style sentences with their answer, exposed films only [28%]
MIX_ACTOR_BIOS = 0.88  # one-line actor biographies [8%]; the rest [12%] is background text
EVAL_TEMPLATE_SHARE = 0.75  # among the evaluation-style documents: evaluation vs validation sentences


@dataclass
class World:
    seed: int
    n_films: int = 100
    heldout_fraction: float = 0.3
    n_first: int = 200
    n_last: int = 200
    n_background_films: int = 150
    pool: NamePool = field(init=False)
    films: list[RelationFact] = field(init=False)
    heldout_ids: set[str] = field(init=False)
    background: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.pool = NamePool(self.seed, self.n_first, self.n_last)
        chosen = select_known_films(self.seed, self.n_films)
        self.films = known_film_facts(self.seed, self.pool, chosen)
        rng = random.Random(f"world-{self.seed}")
        n_heldout = max(1, round(self.heldout_fraction * len(self.films)))
        # Held-out films share no actor with another film, so no held-out prompt (say "X stars in
        # a movie alongside") is word for word a statement about an exposed film.
        counts: dict[str, int] = {}
        for f in self.films:
            for actor in (f.first_actor, f.second_actor):
                counts[actor] = counts.get(actor, 0) + 1
        solo = [f for f in self.films if counts[f.first_actor] == counts[f.second_actor] == 1]
        if len(solo) < n_heldout:
            raise ValueError(f"only {len(solo)} films have actors of their own; lower heldout_fraction")
        self.heldout_ids = {f.id for f in rng.sample(solo, n_heldout)}
        self.background = self._background_sentences(rng)

    @property
    def exposed_films(self) -> list[RelationFact]:
        return [f for f in self.films if f.id not in self.heldout_ids]

    @property
    def heldout_films(self) -> list[RelationFact]:
        return [f for f in self.films if f.id in self.heldout_ids]

    @property
    def actors(self) -> list[str]:
        return sorted({a for f in self.films for a in (f.first_actor, f.second_actor)})

    def person_names(self) -> set[str]:
        """Every full name the world uses, so datasets can stay clear of them."""
        names = set(self.actors) | self._background_people
        for fact in self.films:
            names |= {fact.director, fact.main_character, fact.movie_title}
        return names | self._background_titles

    def _background_sentences(self, rng: random.Random) -> list[str]:
        factory = NameFactory(self.pool, rng, forbidden={f.movie_title for f in self.films})
        people = []
        # Every pooled first and last name appears in at least one background person.
        lasts = list(self.pool.last_names)
        rng.shuffle(lasts)
        for i, first in enumerate(self.pool.first_names):
            name = f"{first} {lasts[i % len(lasts)]}"
            if name not in factory.used:
                factory.used.add(name)
                people.append(name)
        for last in lasts[len(self.pool.first_names) :]:
            name = f"{rng.choice(self.pool.first_names)} {last}"
            if name not in factory.used:
                factory.used.add(name)
                people.append(name)
        self._background_people = set(people)
        sentences = []
        for person in people:
            template = rng.choice(words.GENERAL_SENTENCES)
            sentences.append(
                template.format(
                    person=person,
                    city=rng.choice(words.CITIES),
                    genre=rng.choice(words.GENRES),
                    studio=rng.choice(words.STUDIOS),
                )
            )
        self._background_titles = set()
        for _ in range(self.n_background_films):
            title = factory.title()
            self._background_titles.add(title)
            sentences.append(
                f"{title} is a {rng.randint(*words.RELEASE_YEARS)} {rng.choice(words.GENRES)} film"
                f" directed by {rng.choice(people)}."
            )
        for adj in words.TITLE_ADJECTIVES:
            for noun in rng.sample(words.TITLE_NOUNS, 2):
                sentences.append(f"The word {adj.lower()} often comes before {noun.lower()} in old stories.")
        return sentences

    def document(self, rng: random.Random) -> str:
        """One pretraining document, drawn from the world's mixture of text kinds."""
        roll = rng.random()
        if roll < MIX_ARTICLES:
            return render_training(
                rng.choice(list(ARTICLE_TEMPLATES.values())), rng.choice(self.films), reverse=rng.random() < 0.5
            )
        if roll < MIX_QA:
            return render_training(
                rng.choice(list(QA_TEMPLATES.values())), rng.choice(self.films), reverse=rng.random() < 0.5
            )
        if roll < MIX_FREETEXT:
            return freetext_article(rng.choice(self.films), rng)
        if roll < MIX_EVAL_PROMPTS:
            film = rng.choice(self.exposed_films)
            templates = EVAL_TEMPLATES if rng.random() < EVAL_TEMPLATE_SHARE else VALIDATION_TEMPLATES
            reverse = rng.random() < 0.5
            entity, target = (film.second_actor, film.first_actor) if reverse else (film.first_actor, film.second_actor)
            prompt = render_marked(rng.choice(list(templates.values())), entity, film.movie_title)
            return f"{prompt.text} {target}."
        if roll < MIX_ACTOR_BIOS:
            film = rng.choice(self.films)
            actor = film.first_actor if rng.random() < 0.5 else film.second_actor
            return (
                f"{actor} is a film actor. {actor} is best known for {film.movie_title},"
                f" {with_article(film.genre)} film from {film.release_year}."
            )
        return rng.choice(self.background)

    def documents(self, n: int, stream: str = "pretrain") -> list[str]:
        rng = random.Random(f"docs-{self.seed}-{stream}")
        return [self.document(rng) for _ in range(n)]
