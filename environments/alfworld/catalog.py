"""Static facts of the embedded ALFWorld household: rooms, receptacles, objects, what fits where.

The tables follow the shape of ALFRED/ALFWorld (four scene types, receptacles numbered per type,
``canContain`` between receptacle and object types, heat/cool/clean tools, desk lamps for the
look tasks) but are this project's own choice of entries.
"""

from __future__ import annotations

TASK_TYPES: tuple[str, ...] = ("pick", "look", "clean", "heat", "cool", "pick2")

# ALFWorld's long task-type names (traj_data.json "task_type") -> the short names used here.
LONG_TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}

# Goal phrasings of alfworld's goal library, two per task type ({obj}, {recep}; look uses the lamp).
GOAL_TEMPLATES: dict[str, tuple[str, str]] = {
    "pick": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look": ("look at {obj} under the {recep}", "examine the {obj} with the {recep}"),
    "clean": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "heat": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "cool": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick2": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

LAMP = "desklamp"
LAMP_HOLDERS = frozenset({"desk", "sidetable", "dresser"})
OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
# The receptacle type that performs each transformation (alfred.pddl: MicrowaveType, FridgeType, SinkBasinType).
TOOL_OF_TASK: dict[str, str] = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}

_FOOD = ("apple", "bread", "egg", "lettuce", "potato", "tomato")
_DISHES = ("bowl", "cup", "mug", "plate")
_COOKWARE = ("kettle", "pan", "pot")
_UTENSILS = ("butterknife", "fork", "knife", "ladle", "spatula", "spoon")
_CONDIMENTS = ("dishsponge", "peppershaker", "saltshaker", "soapbottle", "winebottle")
_SMALL = ("cd", "cellphone", "creditcard", "keychain", "pen", "pencil", "remotecontrol", "watch")
_DECOR = ("alarmclock", "statue", "tissuebox", "vase")
_BATH = ("candle", "cloth", "soapbar", "soapbottle", "spraybottle", "toiletpaper")

HEATABLE = frozenset({"apple", "bread", "egg", "potato", "tomato", "cup", "mug", "plate"})
COOLABLE = frozenset(_FOOD + ("bowl", "cup", "mug", "plate", "pan", "pot", "winebottle"))
CLEANABLE = frozenset(
    ("apple", "lettuce", "potato", "tomato") + _DISHES + ("pan", "pot") + _UTENSILS + ("cloth", "dishsponge", "soapbar")
)


def _types(*groups: tuple[str, ...] | str) -> frozenset[str]:
    out: set[str] = set()
    for g in groups:
        out.update((g,) if isinstance(g, str) else g)
    return frozenset(out)


# canContain: receptacle type -> object types it accepts (placement at generation and `move X to Y`).
CAN_CONTAIN: dict[str, frozenset[str]] = {
    "armchair": _types("book", "box", "cellphone", "creditcard", "keychain", "laptop", "newspaper", "pillow",
                       "remotecontrol"),
    "bathtubbasin": _types("cloth", "soapbar", "soapbottle"),
    "bed": _types("book", "cellphone", "laptop", "pillow"),
    "cabinet": _types(_DISHES, _COOKWARE, _CONDIMENTS, "box", "candle", "cloth", "soapbar", "spraybottle",
                      "statue", "tissuebox", "toiletpaper", "vase"),
    "coffeemachine": _types("mug"),
    "coffeetable": _types(_SMALL, _DECOR, "book", "bowl", "box", "laptop", "mug", "newspaper"),
    "countertop": _types(_FOOD, _DISHES, _COOKWARE, _UTENSILS, _CONDIMENTS, _BATH, "tissuebox"),
    "desk": _types(_SMALL, "alarmclock", "book", "bowl", "laptop", "mug", "tissuebox"),
    "diningtable": _types(_FOOD, _DISHES, _COOKWARE, _UTENSILS, _CONDIMENTS, _SMALL, "book", "box", "laptop",
                          "newspaper", "statue", "vase"),
    "drawer": _types(_UTENSILS, _SMALL, "book", "candle", "cloth", "dishsponge", "peppershaker", "saltshaker",
                     "soapbar", "spraybottle", "toiletpaper"),
    "dresser": _types(_SMALL, _DECOR, _BATH, "book", "bowl", "box", "laptop", "mug"),
    "fridge": _types(_FOOD, "bowl", "cup", "mug", "pan", "plate", "pot", "winebottle"),
    "garbagecan": _types("apple", "bread", "cd", "cloth", "creditcard", "dishsponge", "egg", "lettuce",
                         "newspaper", "pen", "pencil", "potato", "soapbar", "soapbottle", "spraybottle",
                         "tissuebox", "toiletpaper", "tomato", "winebottle"),
    "handtowelholder": _types("handtowel"),
    "microwave": _types("apple", "bread", "egg", "potato", "tomato", _DISHES),
    "safe": _types("cd", "cellphone", "creditcard", "keychain", "watch"),
    "shelf": _types(_DISHES, _SMALL, _DECOR, _BATH, "book", "box", "peppershaker", "saltshaker", "winebottle"),
    "sidetable": _types(_SMALL, _DECOR, "book", "bowl", "box", "laptop", "mug", "newspaper"),
    "sinkbasin": _types("apple", "egg", "lettuce", "potato", "tomato", _DISHES, "pan", "pot", _UTENSILS,
                        "cloth", "dishsponge", "soapbar"),
    "sofa": _types("book", "box", "cellphone", "creditcard", "keychain", "laptop", "newspaper", "pillow",
                   "remotecontrol"),
    "stoveburner": _types(_COOKWARE),
    "toaster": frozenset(),
    "toilet": _types(_BATH, "tissuebox"),
    "toiletpaperhanger": _types("toiletpaper"),
    "towelholder": _types("towel"),
    "tvstand": _types("box", "remotecontrol", "statue", "tissuebox", "vase"),
}

# Scene type -> (receptacle type, min count, max count) and the object types that occur in it.
SCENE_RECEPTACLES: dict[str, tuple[tuple[str, int, int], ...]] = {
    "kitchen": (("cabinet", 3, 12), ("coffeemachine", 1, 1), ("countertop", 1, 3), ("diningtable", 0, 1),
                ("drawer", 1, 8), ("fridge", 1, 1), ("garbagecan", 1, 1), ("microwave", 1, 1), ("shelf", 0, 3),
                ("sinkbasin", 1, 1), ("stoveburner", 2, 4), ("toaster", 0, 1)),
    "livingroom": (("armchair", 0, 2), ("cabinet", 0, 4), ("coffeetable", 1, 2), ("diningtable", 0, 1),
                   ("drawer", 0, 4), ("dresser", 0, 1), ("garbagecan", 1, 1), ("shelf", 1, 6),
                   ("sidetable", 1, 2), ("sofa", 1, 1), ("tvstand", 0, 1)),
    "bedroom": (("armchair", 0, 1), ("bed", 1, 1), ("desk", 0, 2), ("drawer", 2, 8), ("dresser", 0, 1),
                ("garbagecan", 1, 1), ("safe", 0, 1), ("shelf", 1, 6), ("sidetable", 1, 2)),
    "bathroom": (("bathtubbasin", 0, 1), ("cabinet", 1, 4), ("countertop", 1, 1), ("drawer", 0, 4),
                 ("dresser", 0, 1), ("garbagecan", 1, 1), ("handtowelholder", 0, 1), ("shelf", 0, 3),
                 ("sinkbasin", 1, 2), ("toilet", 1, 1), ("toiletpaperhanger", 1, 1), ("towelholder", 0, 2)),
}

SCENE_OBJECTS: dict[str, frozenset[str]] = {
    "kitchen": _types(_FOOD, _DISHES, _COOKWARE, _UTENSILS, _CONDIMENTS),
    "livingroom": _types(_SMALL, _DECOR, "book", "bowl", "box", "laptop", "mug", "newspaper", "pillow"),
    "bedroom": _types(_SMALL, "alarmclock", "book", "bowl", "box", "laptop", "mug", "pillow", "tissuebox"),
    "bathroom": _types(_BATH, "dishsponge", "handtowel", "tissuebox", "towel"),
}

# Which task types a scene type offers (as in ALFRED: heat/cool in kitchens, look where lamps stand).
SCENE_TASKS: dict[str, frozenset[str]] = {
    "kitchen": frozenset({"pick", "clean", "heat", "cool", "pick2"}),
    "livingroom": frozenset({"pick", "look", "pick2"}),
    "bedroom": frozenset({"pick", "look", "pick2"}),
    "bathroom": frozenset({"pick", "clean", "pick2"}),
}

# Object types a task may ask for, per task type (look: anything that can be picked up and held).
TASK_OBJECTS: dict[str, frozenset[str]] = {
    "pick": frozenset().union(*SCENE_OBJECTS.values()),
    "pick2": frozenset().union(*SCENE_OBJECTS.values()),
    "look": SCENE_OBJECTS["livingroom"] | SCENE_OBJECTS["bedroom"],
    "clean": CLEANABLE,
    "heat": HEATABLE,
    "cool": COOLABLE,
}
