"""Word lists for generated facts: genres, cities, studios and the pieces of fake film titles."""

from __future__ import annotations

RELEASE_YEARS = (1950, 2024)  # fake films' release years, both ends included

GENRES = (
    "drama", "comedy", "thriller", "romance", "western", "musical", "mystery", "adventure",
    "war", "science fiction", "horror", "crime", "fantasy", "biographical", "sports", "family",
)

CITIES = (
    "Boston", "Chicago", "Denver", "Seattle", "Portland", "Atlanta", "Houston", "Phoenix",
    "Toronto", "Vancouver", "Montreal", "London", "Dublin", "Edinburgh", "Paris", "Lyon",
    "Madrid", "Lisbon", "Rome", "Naples", "Berlin", "Vienna", "Prague", "Oslo", "Stockholm",
    "Sydney", "Melbourne", "Auckland", "Tokyo", "Osaka", "Seoul", "Mumbai", "Cairo", "Lagos",
    "Nairobi", "Havana", "Lima", "Santiago", "Miami", "Detroit",
)

STUDIOS = (
    "Bluefield Pictures", "Northgate Films", "Silver Lantern Studios", "Harbor Light Pictures",
    "Redwood Avenue Films", "Copperline Studios", "Granite Peak Pictures", "Meridian Arc Films",
    "Lighthouse Row Studios", "Seven Rivers Pictures", "Old Mill Films", "Brightwater Studios",
    "Crescent Valley Pictures", "Ironbridge Films", "Blue Heron Studios", "Westwind Pictures",
)

TITLE_ADJECTIVES = (
    "Silent", "Broken", "Golden", "Hidden", "Last", "Distant", "Crimson", "Quiet", "Burning",
    "Frozen", "Hollow", "Wandering", "Bitter", "Gentle", "Restless", "Scarlet", "Forgotten",
    "Northern", "Velvet", "Midnight", "Paper", "Glass", "Iron", "Wild", "Secret", "Lonely",
    "Endless", "Stolen", "Borrowed", "Falling",
)

TITLE_NOUNS = (
    "Harbor", "River", "Garden", "Summer", "Winter", "Orchard", "Lighthouse", "Letter",
    "Highway", "Kingdom", "Promise", "Shadow", "Island", "Horizon", "Carnival", "Compass",
    "Meadow", "Bridge", "Station", "Canyon", "Empire", "Lantern", "Voyage", "Mirror", "Season",
    "Frontier", "Tide", "Orchestra", "Crown", "Signal",
)

TITLE_PATTERNS = (
    "The {adj} {noun}", "{adj} {noun}", "The {noun} of {city}", "Beyond the {adj} {noun}",
    "{noun} in {city}", "The {adj} {noun} of {city}",
)

# Short general sentences for the world text: they train the tokens and the register of articles
# without stating any co-star fact.
GENERAL_SENTENCES = (
    "The festival in {city} showed more than forty films this year.",
    "Critics in {city} praised the {genre} films of the season.",
    "{studio} opened a new office in {city}.",
    "Many {genre} films are shot on location in {city}.",
    "The museum in {city} holds a large collection of film posters.",
    "Audiences in {city} lined up for the premiere of a new {genre} film.",
    "{person} works as a film editor in {city}.",
    "{person} teaches screenwriting at a college in {city}.",
    "{person} was a producer at {studio} for many years.",
    "{person} wrote a book about the history of {genre} films.",
)
