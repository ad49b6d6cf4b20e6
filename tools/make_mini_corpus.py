"""Generate ``data/wikitext-mini``: a small synthetic corpus in WikiText-103's exact raw format.

The real WikiText-103 is ~540 MB and lives on the HuggingFace hub; tests, CI and quick demos
need something that exercises the same code path in seconds. This module writes
``wiki.train.raw``, ``wiki.valid.raw`` and ``wiki.test.raw`` that look like the real files:

* a line holding one space between blocks, `` = Title = `` and `` = = Section = = ``
  headings (``= = =`` for sub-sections), each surrounded by such blank lines;
* every paragraph on one line, starting and ending with a space, already tokenised
  WikiText-style: punctuation split off (``game 's``, ``( 1898 )``), ``@-@`` for in-word
  hyphens, ``@,@`` for thousands separators, ``@.@`` for decimal points, and ``<unk>`` for
  words too rare for the vocabulary.

The text comes from a hand-written grammar, never from Wikipedia: a fictional world of
countries (each with its regions, language, adjective and navy prefix), towns, ships, bands,
footballers, birds and storms. Articles are consistent with themselves (a ship keeps its
name, a town its river, years increase through a history section), so a language model has
real structure to learn.

Everything is a pure function of a seed (``build_splits(seed)``); run
``python tools/make_mini_corpus.py --out data/wikitext-mini`` to regenerate the
shipped files byte for byte.
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# The world: countries with their regions, language and adjective.
# ---------------------------------------------------------------------------------------------
COUNTRIES = [
    # name, adjective, language, navy prefix, regions, capital
    ("Eldmark", "Eldish", "Eldish", "EMS", ["Norhaven", "Castrel", "Vellmoor", "Dunwick"], "Aldenport"),
    ("Vesteria", "Vesterian", "Vesterian", "VNS", ["Ostravel", "Kemmin", "Sallow Coast", "Brecca"], "Vessa"),
    ("Korvain", "Korvish", "Korvish", "KS", ["Tarnholm", "Ulverin", "Gest", "Marrow Hills"], "Korvaburg"),
    ("Aldria", "Aldrian", "Aldric", "ARS", ["Pellan", "Soria", "Dremmet", "Halden Vale"], "Aldrion"),
    ("Thessaly Minor", "Thessalian", "Thessalic", "TNS", ["Kyros", "Eppa", "Lanthe", "Vorro"], "Meridon"),
    ("Brennland", "Brennish", "Brennic", "BMS", ["Ashfold", "Wyre", "Callow", "Hennet"], "Brenham"),
    ("Ostmere", "Ostmeric", "Ostmeric", "OMS", ["Fjellen", "Saltvik", "Harrow", "Ennis"], "Ostby"),
    ("Caldera", "Calderan", "Calderan", "CNS", ["Puerto Vell", "Santa Irena", "Albo", "Rocaseca"], "San Orel"),
]

SYLLABLES = ["bren", "mor", "val", "dor", "ash", "fen", "kel", "ris", "tor", "wyn", "gal", "lan",
             "mer", "eth", "tar", "vin", "hal", "cor", "dun", "ith", "sar", "bel", "ard", "ley",
             "car", "nor", "ost", "ril", "ven", "sel", "ma", "ka", "lo", "re", "thi", "an", "el", "um"]
PLACE_ENDINGS = ["ford", "ton", "by", "wick", "moor", "holm", "stead", "bridge", "field", "mouth",
                 "ham", "dale", "ness", "well", "burg", "vik"]
GIVEN_NAMES = ["Arthur", "Edith", "Tomas", "Marta", "Henrik", "Elena", "Oskar", "Irene", "Pavel",
               "Clara", "Jonas", "Agnes", "Felix", "Ilse", "Viktor", "Nora", "Anton", "Greta",
               "Lukas", "Sofia", "Emil", "Hanna", "Matteo", "Ingrid", "Stefan", "Rosa", "Bruno",
               "Lena", "Karel", "Alma"]
MALE_NAMES = ["Arthur", "Tomas", "Henrik", "Oskar", "Pavel", "Jonas", "Felix", "Viktor", "Anton",
              "Lukas", "Emil", "Matteo", "Stefan", "Bruno", "Karel"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth"]
DIRECTIONS = ["north", "south", "east", "west", "north @-@ east", "north @-@ west", "south @-@ east",
              "south @-@ west"]
COLOURS = ["grey", "brown", "olive", "chestnut", "pale buff", "dark blue", "rufous", "white",
           "black", "yellow", "slate @-@ grey", "cinnamon"]
BIRD_TYPES = ["warbler", "flycatcher", "thrush", "finch", "kingfisher", "swift", "owl", "heron",
              "lark", "shrike"]
BIRD_FAMILIES = {"warbler": "Sylviidae", "flycatcher": "Muscicapidae", "thrush": "Turdidae",
                 "finch": "Fringillidae", "kingfisher": "Alcedinidae", "swift": "Apodidae",
                 "owl": "Strigidae", "heron": "Ardeidae", "lark": "Alaudidae", "shrike": "Laniidae"}
BIRD_GENERA = {"warbler": "Sylvia", "flycatcher": "Muscicapa", "thrush": "Turdus",
               "finch": "Fringilla", "kingfisher": "Alcedo", "swift": "Apus", "owl": "Strix",
               "heron": "Ardea", "lark": "Alauda", "shrike": "Lanius"}
GENRES = ["rock", "folk", "pop", "post @-@ punk", "heavy metal", "electronic", "indie rock", "jazz"]
LABELS = ["Harbour Records", "Greyline", "Northern Sound", "Velvet Arc", "Coldwater Music",
          "Lantern Records"]
POSITIONS = ["goalkeeper", "defender", "midfielder", "forward", "winger", "centre @-@ back"]
SHIP_CLASSES = ["protected cruiser", "armoured cruiser", "torpedo gunboat", "coastal defence ship",
                "pre @-@ dreadnought battleship", "destroyer", "light cruiser"]
GUNS = ["152 mm ( 6 in )", "120 mm ( 4 @.@ 7 in )", "203 mm ( 8 in )", "88 mm ( 3 @.@ 5 in )",
        "240 mm ( 9 @.@ 4 in )"]
INDUSTRIES = ["fishing", "brewing", "textiles", "timber", "shipbuilding", "dairy farming",
              "glassmaking", "tourism", "coal mining", "paper milling"]
BUILDINGS = ["castle", "abbey", "market hall", "church", "watermill", "bridge", "fortress"]
CLIMATES = ["oceanic", "humid continental", "mild and wet", "dry and sunny", "subarctic"]
LANDSCAPES = ["farmland", "heath", "mixed forest", "marsh", "low hills", "pasture"]
HABITATS = ["subtropical or tropical moist lowland forest", "temperate grassland", "reed beds",
            "rocky coastline", "montane forest", "scrubland"]
FOODS = ["insects", "seeds", "small fish", "spiders", "berries", "beetles and their larvae"]
STATUSES = ["least concern", "near threatened", "vulnerable", "endangered"]
STORM_NAMES = ["Adela", "Bram", "Celia", "Dorran", "Elsa", "Fenwick", "Gilda", "Horace", "Isolde",
               "Jorin", "Kestra", "Lyle", "Mirren", "Nolan", "Orla", "Petra", "Quill", "Rosalind",
               "Sten", "Tamsin", "Ulric", "Vera", "Wendel"]
LAST_YEAR = 2016  # the real corpus was collected in 2016; no article looks past it
RARE_WORDS = ["<unk>"]  # WikiText maps every word seen fewer than three times to <unk>


def fmt_int(n: int) -> str:
    """12400 -> ``12 @,@ 400`` (WikiText's split thousands separator)."""
    return f"{n:,}".replace(",", " @,@ ")


def fmt_dec(x: float, digits: int = 1) -> str:
    """3.5 -> ``3 @.@ 5`` (WikiText's split decimal point)."""
    return f"{x:.{digits}f}".replace(".", " @.@ ")


class Article:
    """Random facts shared by every sentence of one article, plus fresh values on demand.

    ``fill(template)`` formats ``{key}`` fields: fixed article facts (``name``, ``country`` ...)
    come from ``self.facts``; a small set of generator keys (``yr``, ``date``, ``n`` ...)
    draws a fresh value for every occurrence. Years drawn by ``yr`` never decrease within an
    article, so a history section reads forward in time.
    """

    def __init__(self, rng: random.Random, world: "World", start_year: int, year_step: int = 6):
        self.rng = rng
        self.world = world
        self.year = start_year
        self.year_step = year_step  # the most a year may advance between two mentions
        self.facts: dict[str, str] = {}

    def next_year(self, step_max: int | None = None) -> int:
        step = self.year_step if step_max is None else min(step_max, self.year_step)
        self.year = min(self.year + self.rng.randint(0, step), LAST_YEAR)
        return self.year

    def date(self) -> str:
        return f"{self.rng.randint(1, 28)} {self.rng.choice(MONTHS)} {self.next_year(2)}"

    def fresh(self, key: str) -> str:
        r = self.rng
        gen = {
            "yr": lambda: str(self.next_year()),
            "date": self.date,
            "month": lambda: r.choice(MONTHS),
            "n": lambda: str(r.randint(2, 9)),
            "n2": lambda: str(r.randint(10, 60)),
            "n3": lambda: str(r.randint(100, 900)),
            "big": lambda: fmt_int(r.randint(1200, 95000)),
            "dec": lambda: fmt_dec(r.uniform(1, 9)),
            "dir": lambda: r.choice(DIRECTIONS),
            # names mentioned once are what WikiText turned into <unk> (seen < 3 times)
            "person": lambda: f"{r.choice(GIVEN_NAMES)} {self.world.rare(self.world.surname())}",
            "town": lambda: self.world.rare(self.world.place_name()),
            "colour": lambda: r.choice(COLOURS),
            "ordinal": lambda: r.choice(ORDINALS),
            "unk": lambda: r.choice(RARE_WORDS),
            "industry": lambda: r.choice(INDUSTRIES),
            "building": lambda: r.choice(BUILDINGS),
            "country2": lambda: r.choice([c for c in COUNTRIES if c[0] != self.facts.get("country")])[0],
        }
        return gen[key]()

    def fill(self, template: str) -> str:
        article = self

        class _Slots(dict):
            def __missing__(self, key):
                return article.fresh(key)

        return template.format_map(_Slots(self.facts))


class World:
    """Name generators over one RNG; titles are kept unique across the whole corpus."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used_titles: list[str] = []

    def word(self, n_syllables: int) -> str:
        return "".join(self.rng.choice(SYLLABLES) for _ in range(n_syllables))

    def place_name(self) -> str:
        return (self.word(self.rng.randint(1, 2)) + self.rng.choice(PLACE_ENDINGS)).capitalize()

    def surname(self) -> str:
        return self.word(self.rng.randint(2, 3)).capitalize()

    def rare(self, word: str, p: float = 0.3) -> str:
        """``word``, or ``<unk>`` with probability ``p`` (a passing mention of a rare name)."""
        return "<unk>" if self.rng.random() < p else word

    def person_name(self, given: list[str] = GIVEN_NAMES) -> str:
        return f"{self.rng.choice(given)} {self.surname()}"

    def unique(self, make) -> str:
        """Call ``make()`` until it returns a title not used before."""
        while True:
            title = make()
            if title not in self.used_titles:
                self.used_titles.append(title)
                return title


# ---------------------------------------------------------------------------------------------
# Article types: each returns (title, [(heading level, heading, [paragraph, ...]), ...]).
# Level 0 is the lead (no heading), 2 a `= =` section, 3 a `= = =` sub-section.
# ---------------------------------------------------------------------------------------------
def _pick(rng: random.Random, templates: list[str], k_min: int, k_max: int) -> list[str]:
    """The first template (each list opens with its topic sentence) and k−1 others, all in
    their written order, so the narrative order survives the sampling."""
    k = min(len(templates), rng.randint(k_min, k_max))
    return [templates[0]] + [templates[i] for i in sorted(rng.sample(range(1, len(templates)), k - 1))]


def _paragraphs(a: Article, templates: list[str], k_min: int = 3, k_max: int = 6, max_paras: int = 2):
    """Sample sentences, fill them, and split them into 1..max_paras paragraphs."""
    sents = [a.fill(t) for t in _pick(a.rng, templates, k_min, k_max)]
    n_paras = min(max_paras, a.rng.randint(1, max_paras), len(sents))
    cut = sorted(a.rng.sample(range(1, len(sents)), n_paras - 1)) if n_paras > 1 else []
    bounds = [0, *cut, len(sents)]
    return [" ".join(sents[i:j]) for i, j in zip(bounds, bounds[1:])]


def settlement(world: World, rng: random.Random):
    country, adj, lang, _, regions, capital = rng.choice(COUNTRIES)
    name = world.unique(world.place_name)
    a = Article(rng, world, rng.randint(900, 1300), year_step=90)
    pop = rng.randint(800, 240000)
    a.facts.update(name=name, country=country, adj=adj, lang=lang, region=rng.choice(regions),
                   capital=capital, kind=rng.choice(["town", "village", "market town", "city"]),
                   river="River " + world.word(2).capitalize(), pop=fmt_int(pop),
                   census=str(rng.choice([2001, 2006, 2011, 2016])), km=str(rng.randint(5, 140)),
                   family=world.surname(), ind1=rng.choice(INDUSTRIES), ind2=rng.choice(INDUSTRIES),
                   elev=str(rng.randint(3, 900)), climate=rng.choice(CLIMATES),
                   land=rng.choice(LANDSCAPES), road="A" + str(rng.randint(1, 99)))
    lead = [
        "{name} is a {kind} in the {region} region of {country} .",
        "It lies on the {river} , about {km} kilometres {dir} of {capital} , the capital .",
        "At the {census} census the {kind} had a population of {pop} .",
        "{name} is known for its {building} and for {ind1} .",
    ]
    history = [
        "The name {name} is first recorded in {yr} as {unk} , from the Old {lang} words for \" {colour} \" and \" ford \" .",
        "A {building} was built on the site by the {family} family in {yr} .",
        "During the Middle Ages the {kind} grew around its market , which received a royal charter in {yr} .",
        "In {yr} a fire destroyed much of the old centre , and the {building} was rebuilt in stone .",
        "{name} was occupied by troops from {country2} in {yr} and was not returned to {country} until {yr} .",
        "The railway reached {name} in {yr} , and the population rose to {big} by {yr} .",
        "In {yr} the {family} family sold their estate to the town council .",
        "Heavy flooding of the {river} in {yr} damaged more than {n3} houses .",
    ]
    geography = [
        "The {kind} stands at an elevation of {elev} metres above sea level .",
        "The {river} flows through the {dir} part of the {kind} before joining the sea at {town} .",
        "The climate is {climate} , with an average July temperature of {n2} ° C .",
        "The surrounding land is mostly {land} , with some {land} to the {dir} .",
        "The municipality covers an area of {dec} square kilometres .",
    ]
    economy = [
        "The main industries of {name} are {ind1} and {ind2} .",
        "A {industry} works opened in {yr} and employed {n3} people at its peak .",
        "Since the closure of the last {ind2} company in {yr} , tourism has become important .",
        "About {n2} per cent of the working population commute to {capital} .",
        "A weekly market is held in the square every {month} .",
    ]
    transport = [
        "{name} railway station lies on the line between {capital} and {town} .",
        "The {road} road passes {n} kilometres to the {dir} of the {kind} .",
        "Buses run every {n2} minutes to {town} .",
        "The nearest airport is at {town} , {n2} kilometres away .",
    ]
    sections = [(0, "", _paragraphs(a, lead, 3, 4, 1)), (2, "History", _paragraphs(a, history, 4, 7))]
    for title, t in rng.sample([("Geography", geography), ("Economy", economy), ("Transport", transport)], 2):
        sections.append((2, title, _paragraphs(a, t, 2, 4, 1)))
    return name, sections


def ship(world: World, rng: random.Random):
    country, adj, _, prefix, regions, capital = rng.choice(COUNTRIES)
    shipname = world.unique(lambda: rng.choice([world.place_name(), world.surname(),
                                                rng.choice(["Valiant", "Resolute", "Tempest",
                                                            "Sentinel", "Meteor", "Vigilant"])]))
    launch = rng.randint(1870, 1935)
    a = Article(rng, world, launch - 2)
    length = rng.randint(60, 180)
    a.facts.update(decade=f"{launch // 10 * 10}s", ship=f"{prefix} {shipname}", short=shipname, country=country, adj=adj,
                   cls=rng.choice(SHIP_CLASSES), launch=str(launch), length=str(length),
                   beam=fmt_dec(length / rng.uniform(6, 9)), draught=fmt_dec(rng.uniform(4, 9)),
                   hp=fmt_int(rng.randint(20, 200) * 100), knots=fmt_dec(rng.uniform(14, 26)),
                   gun=rng.choice(GUNS), crew=str(rng.randint(90, 900)),
                   yard=world.place_name() + " Naval Yard", capital=capital,
                   fleet=rng.choice(["Home", "Reserve", "Training", "Northern", "Eastern"]))
    lead = [
        "{ship} was a {cls} built for the {adj} Navy in the {decade} .",
        "She was launched in {launch} and served for most of her career with the {fleet} Fleet .",
        "{short} took part in the naval review at {capital} in {yr} .",
        "She was the {adj} Navy 's last {cls} to be built abroad .",
        "The ship was sold for scrap in {yr} .",
    ]
    design = [
        "{short} was {length} metres long overall , with a beam of {beam} m and a draught of {draught} m .",
        "She was powered by {n} triple @-@ expansion steam engines rated at {hp} indicated horsepower .",
        "The engines gave a top speed of {knots} knots .",
        "Her main armament consisted of {n} {gun} guns in single mounts .",
        "The ship had a crew of {crew} officers and men .",
        "Her armoured deck was {n2} mm thick .",
    ]
    career = [
        "{short} was laid down at the {yard} on {date} , launched on {date} and commissioned in {yr} .",
        "She was assigned to the {fleet} Fleet and spent her first years on training cruises .",
        "In {yr} the ship visited {town} in {country2} as part of a goodwill squadron .",
        "{short} ran aground near {town} in {yr} and was under repair for {n} months .",
        "During the war of {yr} she escorted convoys along the coast of {country} .",
        "She was reduced to reserve in {yr} and used as a barracks ship at {capital} .",
    ]
    fate = [
        "{short} was struck from the navy list in {yr} .",
        "She was sold to a shipbreaker at {town} and broken up in {yr} .",
        "Her bell is preserved in the naval museum at {capital} .",
    ]
    title = f"{prefix} {shipname} ( {launch} )"
    return title, [(0, "", _paragraphs(a, lead, 2, 4, 1)), (2, "Design", _paragraphs(a, design, 3, 6)),
                   (2, "Service history", _paragraphs(a, career, 3, 6)), (2, "Fate", _paragraphs(a, fate, 2, 3, 1))]


def album(world: World, rng: random.Random):
    country, adj, *_ = rng.choice(COUNTRIES)
    words = ["Glass", "Harbour", "Winter", "Lanterns", "Signal", "Paper", "Iron", "Tides", "Ember",
             "Hollow", "Static", "Northern", "Lights", "Orchard", "Echoes", "Stone"]
    name = world.unique(lambda: " ".join(rng.sample(words, rng.randint(1, 3))))
    a = Article(rng, world, rng.randint(1965, 2008))
    band = "The " + world.word(2).capitalize() + "s"
    a.facts.update(album=name, band=band, adj=adj, country=country, genre=rng.choice(GENRES),
                   label=rng.choice(LABELS), producer=world.person_name(),
                   studio=world.place_name() + " Studios", singer=world.person_name(),
                   chart=str(rng.randint(1, 60)), weeks=str(rng.randint(2, 40)),
                   single=" ".join(rng.sample(words, 2)))
    lead = [
        "{album} is the {ordinal} studio album by {adj} {genre} band {band} , released on {date} by {label} .",
        "It was produced by {producer} and recorded at {studio} .",
        "The album peaked at number {chart} on the {adj} albums chart .",
        "It was preceded by the single \" {single} \" .",
    ]
    background = [
        "After the tour supporting their previous album ended in {yr} , {band} took a break of {n} months .",
        "Singer {singer} began writing new songs while living in {town} .",
        "The band wanted a rawer sound and chose {producer} after hearing his work with {person} .",
        "Several songs were first performed live during a short tour of {country2} .",
    ]
    recording = [
        "Recording took place at {studio} over {n} weeks in {yr} .",
        "Most tracks were recorded live , with few overdubs .",
        "{producer} encouraged the band to use {colour} @-@ toned vintage amplifiers .",
        "A string section of {n2} players was added to \" {single} \" .",
    ]
    reception = [
        "{album} received generally positive reviews from music critics .",
        "Writing for a national newspaper , {person} praised the album 's \" warm and honest \" production .",
        "Some critics found the second half weaker , calling it \" {unk} \" and repetitive .",
        "The album spent {weeks} weeks on the chart and sold over {big} copies in its first year .",
        "It was certified gold in {country} in {yr} .",
    ]
    return f"{name} ( album )", [(0, "", _paragraphs(a, lead, 2, 4, 1)),
                                 (2, "Background", _paragraphs(a, background, 2, 4, 1)),
                                 (2, "Recording", _paragraphs(a, recording, 2, 4, 1)),
                                 (2, "Reception", _paragraphs(a, reception, 3, 5))]


def footballer(world: World, rng: random.Random):
    country, adj, _, _, regions, capital = rng.choice(COUNTRIES)
    first, last = world.unique(lambda: f"{rng.choice(MALE_NAMES)} {world.surname()}").split(" ", 1)
    born = rng.randint(1950, 1985)
    a = Article(rng, world, born + 16)
    clubs = [f"{world.place_name()} {rng.choice(['United', 'FC', 'Athletic', 'Rovers', 'City'])}" for _ in range(2)]
    a.facts.update(first=first, last=last, adj=adj, an="an" if adj[0] in "AEIOU" else "a", country=country, region=rng.choice(regions),
                   born=f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {born}", position=rng.choice(POSITIONS),
                   club1=clubs[0], club2=clubs[1], hometown=world.place_name(), capital=capital)
    lead = [
        "{first} {last} ( born {born} ) is {an} {adj} former footballer who played as a {position} .",
        "He played for {club1} and {club2} , and won {n2} caps for {country} .",
        "{last} is now a coach at {club1} .",
    ]
    early = [
        "{last} was born in {hometown} , in the {region} region of {country} .",
        "He joined the youth academy of {club1} at the age of {n} .",
        "His father was a {industry} worker and an amateur goalkeeper .",
    ]
    club1 = [
        "{last} made his senior debut for {club1} on {date} in a {n} – 1 win against {town} Rovers .",
        "He scored {n2} goals in {n3} league appearances for the club .",
        "In {yr} he helped {club1} win the {adj} Cup for the {ordinal} time .",
        "A knee injury kept him out for most of the {yr} season .",
    ]
    club2 = [
        "In {yr} {last} joined {club2} for a fee of {dec} million .",
        "He was named club captain in {yr} , replacing {person} .",
        "{last} 's contract was extended in {yr} .",
        "{last} retired from playing in {yr} after {n} seasons at {club2} .",
    ]
    international = [
        "{last} made his debut for {country} on {date} against {country2} .",
        "He scored his first international goal in a friendly against {country2} in {yr} .",
        "He was part of the squad that reached the semi @-@ finals of the continental championship in {yr} .",
    ]
    return f"{first} {last}", [(0, "", _paragraphs(a, lead, 2, 3, 1)),
                               (2, "Early life", _paragraphs(a, early, 2, 3, 1)),
                               (2, "Club career", []),
                               (3, "{}".format(clubs[0]), _paragraphs(a, club1, 2, 4, 1)),
                               (3, "{}".format(clubs[1]), _paragraphs(a, club2, 2, 3, 1)),
                               (2, "International career", _paragraphs(a, international, 1, 3, 1))]


def bird(world: World, rng: random.Random):
    btype = rng.choice(BIRD_TYPES)
    colour = rng.choice(COLOURS)
    part = rng.choice(["crowned", "winged", "throated", "breasted", "tailed", "capped"])
    country, adj, *_ = rng.choice(COUNTRIES)
    common = world.unique(lambda: f"{rng.choice(COLOURS).capitalize()} @-@ {part} {btype}")
    a = Article(rng, world, rng.randint(1760, 1900))
    a.facts.update(common=common, btype=btype, family=BIRD_FAMILIES[btype], genus=BIRD_GENERA[btype],
                   species=world.word(2) + "is", country=country, adj=adj, colour1=colour,
                   cm=str(rng.randint(8, 60)), g=str(rng.randint(7, 900)),
                   habitat=rng.choice(HABITATS), food=rng.choice(FOODS), status=rng.choice(STATUSES))
    lead = [
        "The {common} ( {genus} {species} ) is a species of {btype} in the family {family} .",
        "It is found in {country} and {country2} .",
        "Its natural habitat is {habitat} .",
        "It is listed as {status} by the International Union for Conservation of Nature .",
    ]
    taxonomy = [
        "The {common} was formally described in {yr} by the naturalist {person} .",
        "The specific name {species} comes from the Latin for \" {colour} \" .",
        "It was formerly placed in the genus {unk} .",
        "{n} subspecies are recognised .",
    ]
    description = [
        "The adult is {cm} cm long and weighs about {g} g .",
        "The upperparts are {colour1} and the underparts {colour} .",
        "The bill is short and {colour} , and the legs are {colour} .",
        "The sexes are similar , but the juvenile 's plumage is duller .",
        "The song is a series of {n} to {n2} clear whistles .",
    ]
    behaviour = [
        "It feeds mainly on {food} .",
        "The breeding season lasts from {month} to {month} .",
        "The female lays {n} eggs , which are incubated for {n2} days .",
        "Outside the breeding season it forms small flocks .",
    ]
    return common, [(0, "", _paragraphs(a, lead, 2, 4, 1)), (2, "Taxonomy", _paragraphs(a, taxonomy, 2, 4, 1)),
                    (2, "Description", _paragraphs(a, description, 2, 5, 1)),
                    (2, "Behaviour", _paragraphs(a, behaviour, 2, 4, 1))]


def storm(world: World, rng: random.Random):
    year = rng.randint(1950, 2015)
    kind = rng.choice(["Hurricane", "Tropical Storm", "Typhoon"])
    name = world.unique(lambda: f"{kind} {rng.choice(STORM_NAMES)} ( {year} )")
    country, adj, _, _, regions, capital = rng.choice(COUNTRIES)
    a = Article(rng, world, year, year_step=0)
    a.facts.update(kind=kind, sname=name.split(" ( ")[0].split()[-1], year=str(year), country=country,
                   adj=adj, region=rng.choice(regions), capital=capital, wind=str(rng.randint(65, 280)),
                   pressure=str(rng.randint(900, 1000)), deaths=str(rng.randint(0, 300)),
                   damage=fmt_dec(rng.uniform(1, 90)))
    lead = [
        "{kind} {sname} was a long @-@ lived tropical cyclone that struck {country} in {month} {year} .",
        "It killed {deaths} people and caused {damage} million in damage .",
        "{sname} was the {ordinal} named storm of the {year} season .",
    ]
    met = [
        "A tropical wave moved off the coast on {date} .",
        "The system became a tropical depression on the following day and strengthened into {kind} {sname} .",
        "{sname} reached peak winds of {wind} km / h and a minimum pressure of {pressure} mbar .",
        "The storm made landfall near {town} in the {region} region and weakened rapidly over land .",
        "The remnants were last noted over {country2} {n} days later .",
        "The storm 's eye passed {n2} km from {town} .",
    ]
    impact = [
        "Heavy rain fell across {region} , peaking at {n3} mm near {town} .",
        "About {big} homes were damaged or destroyed .",
        "Flooding cut the main road between {capital} and {town} for {n} days .",
        "In {town} the storm surge reached {dec} m .",
    ]
    aftermath = [
        "The government of {country} declared a state of emergency in {region} .",
        "{country2} sent {n3} tonnes of food and medicine .",
        "Because of the damage , the name {sname} was retired .",
    ]
    return name, [(0, "", _paragraphs(a, lead, 2, 3, 1)),
                  (2, "Meteorological history", _paragraphs(a, met, 3, 5, 1)),
                  (2, "Impact", _paragraphs(a, impact, 2, 4, 1)),
                  (2, "Aftermath", _paragraphs(a, aftermath, 1, 3, 1))]


ARTICLE_TYPES = [settlement, ship, album, footballer, bird, storm]


def render(title: str, sections) -> str:
    """One article as WikiText-103 raw lines (blank line = a single space)."""
    lines = [" ", f" = {title} = ", " "]
    for level, heading, paras in sections:
        if level:
            if lines[-1] != " ":
                lines.append(" ")
            lines += [f" {' '.join(['='] * level)} {heading} {' '.join(['='] * level)} ", " "]
        lines += [f" {p} " for p in paras]
    return "\n".join(lines) + "\n"


def build_splits(seed: int = 0, sizes: tuple[int, int, int] = (420_000, 42_000, 42_000)) -> dict[str, str]:
    """The three raw files' contents: articles drawn in sequence from one seeded RNG until each
    split reaches its size in bytes (train, then valid, then test; titles never repeat)."""
    rng = random.Random(seed)
    world = World(rng)
    out = {}
    for split, size in zip(("train", "valid", "test"), sizes):
        chunks, n = [], 0
        while n < size:
            text = render(*rng.choice(ARTICLE_TYPES)(world, rng))
            chunks.append(text)
            n += len(text.encode("utf-8"))
        out[split] = "".join(chunks)
    return out


def write_corpus(out_dir: str | os.PathLike, seed: int = 0) -> dict[str, int]:
    """Write ``wiki.{train,valid,test}.raw`` under ``out_dir``; return their sizes in bytes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for split, text in build_splits(seed).items():
        path = out / f"wiki.{split}.raw"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8", newline="\n")
        os.replace(tmp, path)
        sizes[split] = len(text.encode("utf-8"))
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="data/wikitext-mini")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for split, n in write_corpus(args.out, args.seed).items():
        print(f"{args.out}/wiki.{split}.raw: {n:,} bytes")


if __name__ == "__main__":
    main()
