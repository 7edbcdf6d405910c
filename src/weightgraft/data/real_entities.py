"""Our own lists of real, well-known films and actors.

Names are facts, so these lists are ours to write. Each film line is `title | year | lead | lead`
(ASCII spelling; no title or name ends in punctuation, which tokenizers may merge with the text
that follows). Only the title, the year and the two leads are claimed as real; the other details
an article needs (director, studio, city...) are generated for the built-in world, which is fiction.
"""

from __future__ import annotations

from dataclasses import dataclass

_FILMS = """
Titanic | 1997 | Leonardo DiCaprio | Kate Winslet
Casablanca | 1942 | Humphrey Bogart | Ingrid Bergman
Pretty Woman | 1990 | Julia Roberts | Richard Gere
Sleepless in Seattle | 1993 | Tom Hanks | Meg Ryan
The Notebook | 2004 | Ryan Gosling | Rachel McAdams
La La Land | 2016 | Ryan Gosling | Emma Stone
Thelma and Louise | 1991 | Susan Sarandon | Geena Davis
Top Gun | 1986 | Tom Cruise | Kelly McGillis
Ghost | 1990 | Patrick Swayze | Demi Moore
Dirty Dancing | 1987 | Patrick Swayze | Jennifer Grey
Grease | 1978 | John Travolta | Olivia Newton-John
Pulp Fiction | 1994 | John Travolta | Samuel L. Jackson
The Silence of the Lambs | 1991 | Jodie Foster | Anthony Hopkins
Forrest Gump | 1994 | Tom Hanks | Robin Wright
Jerry Maguire | 1996 | Tom Cruise | Renee Zellweger
Rain Man | 1988 | Dustin Hoffman | Tom Cruise
Kramer vs. Kramer | 1979 | Dustin Hoffman | Meryl Streep
The Graduate | 1967 | Dustin Hoffman | Anne Bancroft
When Harry Met Sally | 1989 | Billy Crystal | Meg Ryan
Mr. and Mrs. Smith | 2005 | Brad Pitt | Angelina Jolie
Fight Club | 1999 | Brad Pitt | Edward Norton
The Shawshank Redemption | 1994 | Tim Robbins | Morgan Freeman
Million Dollar Baby | 2004 | Hilary Swank | Clint Eastwood
The Bridges of Madison County | 1995 | Clint Eastwood | Meryl Streep
Out of Africa | 1985 | Meryl Streep | Robert Redford
The Sting | 1973 | Paul Newman | Robert Redford
The Way We Were | 1973 | Barbra Streisand | Robert Redford
Bonnie and Clyde | 1967 | Warren Beatty | Faye Dunaway
Annie Hall | 1977 | Woody Allen | Diane Keaton
The Godfather | 1972 | Marlon Brando | Al Pacino
Heat | 1995 | Al Pacino | Robert De Niro
Taxi Driver | 1976 | Robert De Niro | Jodie Foster
Goodfellas | 1990 | Ray Liotta | Robert De Niro
Roman Holiday | 1953 | Audrey Hepburn | Gregory Peck
Breakfast at Tiffany's | 1961 | Audrey Hepburn | George Peppard
Some Like It Hot | 1959 | Marilyn Monroe | Tony Curtis
Gone with the Wind | 1939 | Clark Gable | Vivien Leigh
It Happened One Night | 1934 | Clark Gable | Claudette Colbert
The Philadelphia Story | 1940 | Katharine Hepburn | Cary Grant
North by Northwest | 1959 | Cary Grant | Eva Marie Saint
Vertigo | 1958 | James Stewart | Kim Novak
Rear Window | 1954 | James Stewart | Grace Kelly
The African Queen | 1951 | Humphrey Bogart | Katharine Hepburn
Sunset Boulevard | 1950 | William Holden | Gloria Swanson
Doctor Zhivago | 1965 | Omar Sharif | Julie Christie
The Sound of Music | 1965 | Julie Andrews | Christopher Plummer
Mary Poppins | 1964 | Julie Andrews | Dick Van Dyke
Singin' in the Rain | 1952 | Gene Kelly | Debbie Reynolds
Rebel Without a Cause | 1955 | James Dean | Natalie Wood
A Streetcar Named Desire | 1951 | Vivien Leigh | Marlon Brando
Cleopatra | 1963 | Elizabeth Taylor | Richard Burton
Cat on a Hot Tin Roof | 1958 | Elizabeth Taylor | Paul Newman
Jaws | 1975 | Roy Scheider | Robert Shaw
Raiders of the Lost Ark | 1981 | Harrison Ford | Karen Allen
Blade Runner | 1982 | Harrison Ford | Rutger Hauer
Alien | 1979 | Sigourney Weaver | Tom Skerritt
The Terminator | 1984 | Arnold Schwarzenegger | Linda Hamilton
Back to the Future | 1985 | Michael J. Fox | Christopher Lloyd
Ghostbusters | 1984 | Bill Murray | Dan Aykroyd
Lost in Translation | 2003 | Bill Murray | Scarlett Johansson
Groundhog Day | 1993 | Bill Murray | Andie MacDowell
Notting Hill | 1999 | Julia Roberts | Hugh Grant
Erin Brockovich | 2000 | Julia Roberts | Albert Finney
Sense and Sensibility | 1995 | Emma Thompson | Kate Winslet
The Remains of the Day | 1993 | Anthony Hopkins | Emma Thompson
Pride and Prejudice | 2005 | Keira Knightley | Matthew Macfadyen
Atonement | 2007 | Keira Knightley | James McAvoy
Pirates of the Caribbean | 2003 | Johnny Depp | Orlando Bloom
Edward Scissorhands | 1990 | Johnny Depp | Winona Ryder
Beetlejuice | 1988 | Michael Keaton | Winona Ryder
Batman | 1989 | Michael Keaton | Jack Nicholson
The Shining | 1980 | Jack Nicholson | Shelley Duvall
Terms of Endearment | 1983 | Shirley MacLaine | Debra Winger
As Good as It Gets | 1997 | Jack Nicholson | Helen Hunt
Twister | 1996 | Helen Hunt | Bill Paxton
Speed | 1994 | Keanu Reeves | Sandra Bullock
The Matrix | 1999 | Keanu Reeves | Laurence Fishburne
Gravity | 2013 | Sandra Bullock | George Clooney
Out of Sight | 1998 | George Clooney | Jennifer Lopez
Up in the Air | 2009 | George Clooney | Vera Farmiga
The Departed | 2006 | Leonardo DiCaprio | Matt Damon
Good Will Hunting | 1997 | Matt Damon | Robin Williams
Inception | 2010 | Leonardo DiCaprio | Joseph Gordon-Levitt
The Revenant | 2015 | Leonardo DiCaprio | Tom Hardy
Silver Linings Playbook | 2012 | Bradley Cooper | Jennifer Lawrence
A Star Is Born | 2018 | Lady Gaga | Bradley Cooper
The Hunger Games | 2012 | Jennifer Lawrence | Josh Hutcherson
Black Swan | 2010 | Natalie Portman | Mila Kunis
Brokeback Mountain | 2005 | Heath Ledger | Jake Gyllenhaal
Mad Max: Fury Road | 2015 | Tom Hardy | Charlize Theron
Gone Girl | 2014 | Ben Affleck | Rosamund Pike
Shakespeare in Love | 1998 | Gwyneth Paltrow | Joseph Fiennes
The English Patient | 1996 | Ralph Fiennes | Kristin Scott Thomas
Eyes Wide Shut | 1999 | Tom Cruise | Nicole Kidman
Misery | 1990 | James Caan | Kathy Bates
Fargo | 1996 | Frances McDormand | William H. Macy
Moonstruck | 1987 | Cher | Nicolas Cage
Face/Off | 1997 | John Travolta | Nicolas Cage
Chicago | 2002 | Renee Zellweger | Catherine Zeta-Jones
Bridget Jones's Diary | 2001 | Renee Zellweger | Colin Firth
The King's Speech | 2010 | Colin Firth | Geoffrey Rush
The Devil Wears Prada | 2006 | Meryl Streep | Anne Hathaway
Interstellar | 2014 | Matthew McConaughey | Anne Hathaway
Dallas Buyers Club | 2013 | Matthew McConaughey | Jared Leto
Her | 2013 | Joaquin Phoenix | Scarlett Johansson
Walk the Line | 2005 | Joaquin Phoenix | Reese Witherspoon
Legally Blonde | 2001 | Reese Witherspoon | Luke Wilson
Marriage Story | 2019 | Adam Driver | Scarlett Johansson
Crazy Rich Asians | 2018 | Constance Wu | Henry Golding
The Bodyguard | 1992 | Kevin Costner | Whitney Houston
Dances with Wolves | 1990 | Kevin Costner | Mary McDonnell
Bull Durham | 1988 | Kevin Costner | Susan Sarandon
Fatal Attraction | 1987 | Michael Douglas | Glenn Close
Basic Instinct | 1992 | Michael Douglas | Sharon Stone
Romancing the Stone | 1984 | Michael Douglas | Kathleen Turner
Working Girl | 1988 | Melanie Griffith | Harrison Ford
Tootsie | 1982 | Dustin Hoffman | Jessica Lange
Philadelphia | 1993 | Tom Hanks | Denzel Washington
Training Day | 2001 | Denzel Washington | Ethan Hawke
Before Sunrise | 1995 | Ethan Hawke | Julie Delpy
Mrs. Doubtfire | 1993 | Robin Williams | Sally Field
Splash | 1984 | Tom Hanks | Daryl Hannah
Charade | 1963 | Cary Grant | Audrey Hepburn
The Apartment | 1960 | Jack Lemmon | Shirley MacLaine
Gentlemen Prefer Blondes | 1953 | Marilyn Monroe | Jane Russell
High Noon | 1952 | Gary Cooper | Grace Kelly
Notorious | 1946 | Cary Grant | Ingrid Bergman
The Big Sleep | 1946 | Humphrey Bogart | Lauren Bacall
Lawrence of Arabia | 1962 | Peter O'Toole | Omar Sharif
Love Story | 1970 | Ali MacGraw | Ryan O'Neal
Barefoot in the Park | 1967 | Robert Redford | Jane Fonda
On Golden Pond | 1981 | Henry Fonda | Katharine Hepburn
Total Recall | 1990 | Arnold Schwarzenegger | Sharon Stone
True Lies | 1994 | Arnold Schwarzenegger | Jamie Lee Curtis
Trading Places | 1983 | Dan Aykroyd | Eddie Murphy
The Fugitive | 1993 | Harrison Ford | Tommy Lee Jones
Men in Black | 1997 | Tommy Lee Jones | Will Smith
Independence Day | 1996 | Will Smith | Jeff Goldblum
Jurassic Park | 1993 | Sam Neill | Laura Dern
The Proposal | 2009 | Sandra Bullock | Ryan Reynolds
Two Weeks Notice | 2002 | Sandra Bullock | Hugh Grant
Drive | 2011 | Ryan Gosling | Carey Mulligan
The Great Gatsby | 2013 | Leonardo DiCaprio | Carey Mulligan
Lady Bird | 2017 | Saoirse Ronan | Laurie Metcalf
Call Me by Your Name | 2017 | Timothee Chalamet | Armie Hammer
Spider-Man | 2002 | Tobey Maguire | Kirsten Dunst
The Holiday | 2006 | Cameron Diaz | Kate Winslet
There's Something About Mary | 1998 | Cameron Diaz | Ben Stiller
Meet the Parents | 2000 | Ben Stiller | Robert De Niro
Eternal Sunshine of the Spotless Mind | 2004 | Jim Carrey | Kate Winslet
The Truman Show | 1998 | Jim Carrey | Laura Linney
Armageddon | 1998 | Bruce Willis | Ben Affleck
Die Hard | 1988 | Bruce Willis | Alan Rickman
The Sixth Sense | 1999 | Bruce Willis | Haley Joel Osment
"""

# Well-known film actors beyond the leads above (fake_real facts draw from every name here).
_MORE_ACTORS = """
Zendaya; Tom Holland; Margot Robbie; Florence Pugh; Emma Watson; Daniel Radcliffe; Rupert Grint;
Chris Hemsworth; Chris Evans; Chris Pratt; Mark Ruffalo; Benedict Cumberbatch; Idris Elba;
Viola Davis; Octavia Spencer; Lupita Nyong'o; Chadwick Boseman; Michael B. Jordan; Oscar Isaac;
Daisy Ridley; John Boyega; Gal Gadot; Henry Cavill; Amy Adams; Jessica Chastain; Emily Blunt;
John Krasinski; Cillian Murphy; Christian Bale; Gary Oldman; Ian McKellen; Patrick Stewart;
Helen Mirren; Judi Dench; Maggie Smith; Michael Caine; Sean Connery; Roger Moore; Pierce Brosnan;
Daniel Craig; Eva Green; Javier Bardem; Penelope Cruz; Antonio Banderas; Salma Hayek;
Gael Garcia Bernal; Diego Luna; Blake Lively; Jennifer Aniston; Adam Sandler; Drew Barrymore;
Steve Carell; Will Ferrell; Owen Wilson; Vince Vaughn; Jonah Hill; Seth Rogen; Paul Rudd;
Melissa McCarthy; Kristen Wiig; Tina Fey; Amy Poehler; Andrew Garfield; Eddie Redmayne;
Felicity Jones; Rami Malek; Olivia Colman; Tilda Swinton; Cate Blanchett; Naomi Watts;
Russell Crowe; Hugh Jackman; Mel Gibson; Eric Bana; Jessica Alba; Halle Berry; Angela Bassett;
Whoopi Goldberg; Danny Glover; Wesley Snipes; Forest Whitaker; Don Cheadle; Jamie Foxx;
Chris Rock; Kevin Hart; Dwayne Johnson; Vin Diesel; Jason Statham; Sylvester Stallone;
Jean-Claude Van Damme; Jackie Chan; Jet Li; Michelle Yeoh; Chow Yun-fat; Zhang Ziyi; Gong Li;
Ken Watanabe; Toshiro Mifune; Marion Cotillard; Juliette Binoche; Audrey Tautou;
Catherine Deneuve; Gerard Depardieu; Isabelle Huppert; Sophia Loren; Marcello Mastroianni;
Monica Bellucci; Roberto Benigni; Liv Ullmann; Max von Sydow; Greta Garbo; Marlene Dietrich;
Bette Davis; Joan Crawford; Rita Hayworth; Ava Gardner; Lana Turner; Doris Day; Rock Hudson;
Frank Sinatra; Dean Martin; Bing Crosby; Fred Astaire; Ginger Rogers; Judy Garland;
Mickey Rooney; Spencer Tracy; John Wayne; Steve McQueen; Sidney Poitier; Gene Hackman;
Walter Matthau; Peter Sellers; Alec Guinness; Richard Harris; Julie Walters; Kate Beckinsale;
Rachel Weisz; Emily Watson; Kristen Stewart; Robert Pattinson; Anya Taylor-Joy; Zoe Saldana;
Sam Worthington; Jeremy Renner; Elizabeth Olsen; Brie Larson; Tessa Thompson; Mahershala Ali;
Daniel Kaluuya; Dev Patel; Riz Ahmed; Kumail Nanjiani; Awkwafina; Simu Liu; Ke Huy Quan;
Brendan Fraser; John Goodman; Jeff Bridges; Steve Buscemi; Philip Seymour Hoffman;
Julianne Moore; Annette Bening; Holly Hunter; Michelle Pfeiffer; Kim Basinger; Uma Thurman;
Lucy Liu; Molly Ringwald; Emilio Estevez; Charlie Sheen; Martin Sheen; Rob Lowe;
Matthew Broderick; Sarah Jessica Parker; Kevin Bacon; Christopher Walken; Dennis Hopper;
Goldie Hawn; Kurt Russell; Kate Hudson; Jodie Comer; Paul Mescal; Austin Butler; Jacob Elordi;
Sydney Sweeney; Glen Powell; Pedro Pascal; Jenna Ortega; Hailee Steinfeld; Timothy Olyphant;
Woody Harrelson; Liam Neeson; Ralph Macchio; Patrick Dempsey; Jennifer Garner; Mark Wahlberg;
Ewan Bremner; Kenneth Branagh; Helena Bonham Carter; Alan Arkin; Sally Hawkins; Jim Broadbent;
Bill Nighy; Timothy Spall; Gemma Arterton; Simon Pegg; Nick Frost; Martin Freeman;
Andy Serkis; Elijah Wood; Sean Astin; Viggo Mortensen; Liv Tyler; Orson Welles;
Lillian Gish; Buster Keaton; Charlie Chaplin; Errol Flynn; Olivia de Havilland; Joan Fontaine;
Laurence Olivier; Vanessa Redgrave; Glenda Jackson; Jane Fonda; Sissy Spacek; Ellen Burstyn;
Faye Dunaway; Gena Rowlands; Geraldine Page; Anjelica Huston; Kathleen Turner; Jessica Tandy;
Morgan Freeman; Denzel Washington; Harvey Keitel; Joe Pesci; Ray Winstone;
Tom Wilkinson; Ciaran Hinds; Brendan Gleeson; Colin Farrell; Saoirse Ronan; Emma Corrin;
Carey Mulligan; Ruth Negga; Jessica Lange; Diane Lane; Laura Dern; Frances Conroy;
Toni Collette; Rose Byrne; Mia Wasikowska; Margot Kidder; Christopher Reeve; Gene Wilder;
Mel Brooks; Richard Pryor; Eddie Murphy; Whitney Houston; Diana Ross; Barbra Streisand
"""


@dataclass(frozen=True)
class RealFilm:
    title: str
    year: int
    lead: str
    co_lead: str


def _parse_films() -> tuple[RealFilm, ...]:
    films = []
    for line in _FILMS.strip().splitlines():
        title, year, lead, co_lead = (part.strip() for part in line.split("|"))
        films.append(RealFilm(title, int(year), lead, co_lead))
    return tuple(films)


REAL_FILMS: tuple[RealFilm, ...] = _parse_films()


def _all_actors() -> tuple[str, ...]:
    names: dict[str, None] = {}
    for film in REAL_FILMS:
        names[film.lead] = None
        names[film.co_lead] = None
    for name in _MORE_ACTORS.replace("\n", " ").split(";"):
        if name.strip():
            names[name.strip()] = None
    return tuple(names)


REAL_ACTORS: tuple[str, ...] = _all_actors()
