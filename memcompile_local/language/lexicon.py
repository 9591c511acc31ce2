"""Word lists the English rules share: small talk, light verbs, time words, verb forms.

Plain frozensets and dicts, built once at import and never changed, so any thread may read
them. Sentence filtering, keyword chunking, name finding and verb agreement all consult the
same lists, which is why they live outside any one of those rules.
"""

from __future__ import annotations

from memcompile_local.language.timeparse import MONTH_NAMES, WEEKDAY_NAMES

__all__ = [
    "FILLER",
    "COMMON_VERBS",
    "TIME_WORDS",
    "LY_NOUNS",
    "ED_NOUNS",
    "KEYWORD_EXCLUDE",
    "NON_NAMES",
    "PRESENT_VERBS",
    "IRREGULAR_VERBS",
]

# Words that make a sentence small talk rather than content. A sentence whose only
# non-stopword words come from here (or are names) is dropped.
FILLER: frozenset[str] = frozenset(
    """hey hi hello hiya howdy heya greetings thanks thank thx ty bye goodbye cya later soon talk chat
    care wow whoa woah yay yayy cool great awesome amazing nice good glad happy lovely wonderful
    fantastic incredible beautiful sweet true totally absolutely definitely sure yes yep yup nope
    agree agreed congrats congratulations haha hahaha lol omg gosh wish luck best hope hoping fun
    fascinating interesting impressive proud inspiring cute exciting excited thing things stuff lot
    lots way well much many mean means meant know think thought guess bet sound sounds sounded seem
    seems look looks see seeing hear hearing heard feel feeling right anything something everything
    nothing new going doing pretty super indeed exactly course kind sort appreciate appreciated
    welcome neat tell telling told say saying keep let get got certainly surely reckon wonder
    wondering yeah ah aw awww hmm um uh alright man dude guys day night morning time totally glad
    lucky blessed awesome cheers excellent perfect brilliant terrific enjoy enjoyed catch care
    touch soon anytime ya yo wanna gotta gonna cause great definitely love loved remember happen
    happened means totally sounds""".split()
)

# Light verbs that rarely name what a sentence is about: not keywords, and a question made
# only of them ("What made you choose that?") is small talk.
COMMON_VERBS: frozenset[str] = frozenset(
    """be go goes went gone going get gets got gotten getting make makes made making take takes took
    taken taking do does did done doing have has had having say says said saying come comes came
    coming give gives gave given giving put puts let lets try tries tried trying want wants wanted
    wanting need needs needed use uses used find finds found tell tells told ask asks asked seem
    seems seemed feel feels felt keep keeps kept start starts started begin began begun help helps
    helped show shows showed like likes liked love loves loved choose chose chosen think thinks
    thought know knows knew known see sees saw seen look looks looked call called decide decided
    happen happened mean meant share shared bring brought become became felt hope hoped wish
    wished guess realize realized""".split()
)

TIME_WORDS: frozenset[str] = frozenset(
    """yesterday today tomorrow tonight week weeks weekend weekends month months year years day days
    ago last next night morning afternoon evening recently lately earlier later now currently
    soon""".split()
    + [m.lower() for m in MONTH_NAMES] + [d.lower() for d in WEEKDAY_NAMES]
)

LY_NOUNS = frozenset(
    """family italy july jelly rally lily belly bully ally assembly supply reply butterfly dragonfly
    firefly anomaly monopoly melancholy holly fly""".split()
)

# Words ending in -ed that are nouns, not past tenses or participles.
ED_NOUNS = frozenset("hundred speed breed seed weed greed sled shed bred".split())

KEYWORD_EXCLUDE: frozenset[str] = FILLER | COMMON_VERBS | TIME_WORDS | frozenset(
    """also really just still always never often usually sometimes actually even truly honestly
    kinda maybe perhaps probably lot lots bit little big tons ton bunch couple few several every
    another anyone someone everyone thing things stuff way ways yes yeah oh ok okay hmm
    one two three four five six seven eight nine ten after before since until till while during
    through between around without within because though although via per among across behind
    beyond toward towards upon onto unless whether able better worse ever gonna kinda wanna gotta
    thinkin lemme yours etc already especially together else much many ones cannot""".split()
)

NON_NAMES: frozenset[str] = frozenset(
    """I I'm I've I'll I'd Mom Mum Dad Mommy Daddy Mama Papa Grandma Grandpa Granny God Lord OK Okay
    TV Internet English Spanish French German Chinese Japanese Italian American British Canadian
    Mexican Indian European Christmas Easter Thanksgiving Halloween Hanukkah Pride Valentine's
    Mother's Father's Day New Year Eve Mr Mrs Ms Dr Hey Hi Hello Thanks Wow Yes No Oh Yeah LOL
    Haha Congrats Congratulations Sure Totally Absolutely Awesome Great Cool Nice Omg Ah Aw Well
    So And But Or If When What Why How Where Who Which That This These Those The A An It It's
    There Here They We You He She My Your Our Their His Her""".split()
    + list(MONTH_NAMES) + list(WEEKDAY_NAMES)
)

# Present-tense verbs whose third-person form is added after a rewritten singular subject.
PRESENT_VERBS = frozenset(
    """love like enjoy want need think know feel hope wish work live go play paint write plan try
    make take get keep use run teach study believe prefer hate miss remember forget mean own
    volunteer appreciate agree understand find see hear care support help adore collect practice
    cook bake swim dance sing draw travel visit attend spend stay look seem struggle admire guess
    bet say love dream worry wonder cherish value owe volunteer mentor advocate identify relate
    imagine realize recommend suggest grow raise build create sew knit garden hike bike ride drive
    walk jog climb fish camp surf ski skate listen watch speak learn coach host organize
    belong sign join start begin finish read eat drink cook meet call text move open close
    teach share post record film design shop buy sell bring wear carry feed train practise
    celebrate decide exercise meditate""".split()
)

# Irregular (and a few regular but e-final) past forms with their base form.
IRREGULAR_VERBS = {
    "went": "go", "gone": "go", "goes": "go", "got": "get", "gotten": "get", "made": "make",
    "took": "take", "taken": "take", "saw": "see", "seen": "see", "had": "have", "has": "have",
    "did": "do", "done": "do", "does": "do", "was": "be", "were": "be", "been": "be", "is": "be",
    "am": "be", "are": "be", "felt": "feel", "found": "find", "told": "tell", "thought": "think",
    "knew": "know", "known": "know", "bought": "buy", "brought": "bring", "came": "come",
    "began": "begin", "begun": "begin", "ran": "run", "wrote": "write", "written": "write",
    "met": "meet", "left": "leave", "kept": "keep", "spent": "spend", "taught": "teach",
    "caught": "catch", "sang": "sing", "sung": "sing", "drew": "draw", "drawn": "draw",
    "gave": "give", "given": "give", "ate": "eat", "eaten": "eat", "slept": "sleep", "won": "win",
    "lost": "lose", "built": "build", "sent": "send", "held": "hold", "heard": "hear",
    "said": "say", "paid": "pay", "fell": "fall", "chose": "choose", "chosen": "choose",
    "became": "become", "grew": "grow", "grown": "grow", "swam": "swim", "rode": "ride",
    "drove": "drive", "flew": "fly", "read": "read", "sat": "sit", "stood": "stand", "wore": "wear",
    "lived": "live", "loved": "love", "moved": "move", "hoped": "hope", "liked": "like",
    "baked": "bake", "danced": "dance", "created": "create", "decided": "decide", "shared": "share",
    "used": "use", "joined": "join", "adored": "adore", "practiced": "practice", "raced": "race",
    "hiked": "hike", "received": "receive", "closed": "close", "arrived": "arrive",
    "graduated": "graduate", "celebrated": "celebrate", "volunteered": "volunteer",
    "explored": "explore", "inspired": "inspire", "participated": "participate",
}
