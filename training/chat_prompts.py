"""Chat prompts for distilling the SmolLM2 draft: templates x subjects, deterministic, split by a hash.

The target answers these prompts itself (greedy and sampled); the draft is distilled on those answers with the
target's own logits. A prompt's split is a hash of its text, so adding prompts never moves an old one. The
held-out split is shipped with the pair (`exactspec/pairs/smollm2_pair/prompts.json`) for the demo and the bench;
a separate, hand-written unseen set lives in `benchmarks/prompts/unseen_chat.json` and is never trained on.
"""
from __future__ import annotations

import hashlib
import itertools
import random

CODE_TASKS = [
    "reverses the words in a sentence", "checks whether a number is prime", "merges two sorted lists",
    "counts the vowels in a string", "returns the n-th Fibonacci number", "flattens a nested list",
    "removes duplicates from a list while keeping the order", "computes the factorial of a number",
    "finds the largest element in a list", "checks whether a string is a palindrome",
    "converts Celsius to Fahrenheit", "reads a CSV file and prints each row", "sorts a list of dictionaries by a key",
    "computes the average of a list of numbers", "returns the most common word in a text",
    "checks whether two strings are anagrams", "implements binary search", "transposes a matrix",
    "validates an email address with a regular expression", "groups a list of words by their first letter",
    "computes the greatest common divisor of two numbers", "generates all subsets of a set",
    "counts the lines in a file", "converts a Roman numeral to an integer", "implements a simple stack class",
    "implements a queue with two stacks", "finds the second largest number in a list",
    "capitalizes the first letter of every word", "computes the sum of the digits of a number",
    "splits a list into chunks of size n", "checks whether a year is a leap year",
    "returns the intersection of two lists", "implements bubble sort", "implements quicksort",
    "parses a JSON string and prints its keys", "computes the dot product of two vectors",
    "finds all prime numbers below n", "converts a number to binary", "rotates a list by k positions",
    "computes the length of the longest word in a sentence",
]
LANGUAGES = ["Python", "JavaScript", "Python", "Python", "Java", "C", "Rust", "Go", "TypeScript", "Python"]
CODE_TEMPLATES = [
    "Write a {lang} function that {task}.", "How do I write a {lang} function that {task}?",
    "Can you show me {lang} code that {task}?", "Give me a short {lang} example that {task}, with comments.",
    "Explain step by step how to write a {lang} function that {task}.",
]
SUBJECTS = [
    "photosynthesis", "the water cycle", "black holes", "the French Revolution", "machine learning",
    "recursion in programming", "the immune system", "climate change", "the stock market", "vaccines",
    "the theory of evolution", "gravity", "the internet", "democracy", "inflation", "plate tectonics",
    "the solar system", "DNA", "the Renaissance", "electricity", "neural networks", "the Roman Empire",
    "volcanoes", "the human heart", "blockchain", "the greenhouse effect", "supply and demand", "the moon",
    "antibiotics", "the printing press", "renewable energy", "sleep", "the Great Wall of China", "rainbows",
    "earthquakes", "the Olympic Games", "coffee", "bees", "compound interest", "the speed of light",
    "hash tables", "version control with git", "object-oriented programming", "databases", "encryption",
    "operating systems", "cloud computing", "the Python programming language", "sorting algorithms",
    "time zones", "the periodic table", "tides", "memory in computers", "the Industrial Revolution",
    "the brain", "exercise", "healthy eating", "meditation", "public speaking", "learning a new language",
]
EXPLAIN_TEMPLATES = [
    "Explain {s} in simple terms.", "What is {s}?", "Give me three interesting facts about {s}.",
    "Why is {s} important?", "Write a short paragraph about {s}.", "Explain {s} to a ten-year-old.",
    "What are the main ideas behind {s}?", "Summarize the history of {s} in a few sentences.",
    "What are common misconceptions about {s}?", "List the pros and cons of {s}.",
]
WRITING = [
    "Write a short poem about {s}.", "Write a haiku about {s}.", "Write a short story that involves {s}.",
    "Write a tweet about {s}.", "Suggest a title for a blog post about {s}.",
]
EVERYDAY = [
    "How do I make a cup of tea?", "What should I pack for a weekend trip?", "How can I sleep better?",
    "Give me tips for a job interview.", "How do I start running?", "What is a good way to save money?",
    "How can I be more productive?", "Suggest a name for a pet cat.", "How do I cook rice?",
    "What are some good habits for students?", "How do I write a cover letter?", "How do I make pancakes?",
    "Write a polite email asking for a meeting next week.", "Write a thank-you note to a teacher.",
    "How do I plant tomatoes?", "What is the difference between weather and climate?",
    "What is 15 times 12?", "If I have 3 apples and buy 5 more, how many do I have?",
    "Convert 10 kilometers to miles.", "What is the capital of France?", "What is the capital of Japan?",
    "Who wrote Romeo and Juliet?", "How many days are in a leap year?", "What is the boiling point of water?",
    "Translate 'good morning' into Spanish.", "Translate 'thank you' into French.",
    "What is the difference between a list and a tuple in Python?", "What does HTTP stand for?",
    "What is the difference between RAM and storage?", "How do I center a div in CSS?",
    "What is a REST API?", "What is the difference between git merge and git rebase?",
]
COMPARE = [("cats", "dogs"), ("Python", "JavaScript"), ("tea", "coffee"), ("trains", "planes"),
           ("books", "movies"), ("summer", "winter"), ("SQL", "NoSQL databases"), ("TCP", "UDP"),
           ("lists", "dictionaries in Python"), ("solar power", "wind power"), ("viruses", "bacteria"),
           ("weather", "climate"), ("a laptop", "a desktop computer"), ("running", "swimming")]

# A second, broader set of request kinds (added in the second distillation round, to make the training answers
# less templated): how things work, advice on a situation, messages to write, code beyond one function,
# list requests, rewriting, arithmetic in words, travel. Written from general chat use, not from any bench set.
DEVICES = [
    "a microwave oven", "a bicycle's gears", "an electric car's battery", "a thermostat", "GPS", "a touchscreen",
    "an elevator", "a dishwasher", "noise-cancelling headphones", "a solar panel", "a camera lens",
    "a smoke detector", "a washing machine", "a jet engine", "a credit card chip", "a QR code", "a Wi-Fi router",
    "an air conditioner", "a compass", "a pressure cooker", "a hearing aid", "an electric kettle",
    "a barcode scanner", "a heat pump", "a lock and key", "a sewing machine", "a hard drive", "a search engine",
]
HOW_TEMPLATES = ["How does {d} work?", "Explain briefly how {d} works.", "What happens inside {d} when it is on?"]
SITUATIONS = [
    "just moved to a new city and don't know anyone", "keep putting off writing my thesis",
    "have to give a talk in front of two hundred people next week", "want to learn the guitar as an adult",
    "am starting my first job as a software developer on Monday", "spend too much time on my phone",
    "want to adopt a dog but live in a small flat", "have an exam in three days and feel behind",
    "argued with my roommate about cleaning", "want to start a small vegetable garden on my balcony",
    "need to choose between two job offers", "want to run a 10k race in two months",
    "forgot my friend's name at a party", "have a long flight tomorrow and hate flying",
    "want to read more books this year", "am nervous about driving on the motorway",
    "keep waking up tired even after eight hours of sleep", "want to cook dinner for six people on a budget",
    "have to tell my team that a deadline will slip", "want to switch careers into data analysis",
]
ADVICE_TEMPLATES = ["I {s}. What should I do?", "I {s}. Any advice?", "I {s}. Where do I start?"]
MESSAGES = [
    "Write a short message to my landlord about a leaking tap.",
    "Write an email to a colleague asking them to review my report by Friday.",
    "Write a text inviting friends to a board game night on Saturday.",
    "Write a note to my neighbour asking them to water my plants while I am away.",
    "Write a short message congratulating a coworker on their promotion.",
    "Write an out-of-office reply for a two-week holiday.",
    "Write a polite complaint to a shop about a late delivery.",
    "Write a message to a teacher explaining that my child will miss school tomorrow.",
    "Write a short welcome message for a new member of our book club.",
    "Write an email declining a meeting invitation politely.",
    "Write a reminder to my team about tomorrow's stand-up moved to 10 am.",
    "Write a thank-you email after a job interview.",
    "Write a short speech to toast my sister at her wedding.",
    "Write a message asking my manager for a day off next Friday.",
    "Write a product description for a handmade ceramic mug.",
    "Write a short bio for a conference speaker who works on renewable energy.",
]
CODE_SNIPPETS = [
    "Write a bash script that renames every .txt file in a folder to .md.",
    "Write a shell command that counts how many times the word error appears in a log file.",
    "Write a SQL query that finds the three most expensive products in a products table.",
    "Write a SQL query that lists customers who have never placed an order.",
    "Write a regular expression that matches a US phone number.",
    "Write an HTML form with a name field, an email field and a submit button.",
    "Write CSS that makes a button change colour when the mouse is over it.",
    "Write a Python script that downloads nothing but prints today's date in ISO format.",
    "Write a Python class for a to-do list with add, remove and list methods.",
    "Write a Python class that represents a rectangle and computes its area and perimeter.",
    "Write a JavaScript function that debounces another function.",
    "Write a Python dataclass for a book with a title, an author and a year.",
    "Write a Python generator that yields the squares of numbers from 1 to n.",
    "Write a unit test with pytest for a function that adds two numbers.",
    "Write a Dockerfile for a small Python web application.",
    "Write a git command sequence to create a new branch and push it.",
    "Write a Python function that reads a text file and returns its word count, with error handling.",
    "Write a JavaScript snippet that fetches JSON from a URL and logs it.",
    "Write a C function that swaps two integers using pointers.",
    "Write a Rust function that returns the longest string in a vector of strings.",
    "Write a Go program that prints the numbers from 1 to 10.",
    "Write a Python decorator that prints how long a function takes.",
    "Explain what this Python line does: squares = [x * x for x in range(10) if x % 2 == 0]",
    "What does the Python keyword yield do?", "What is a race condition in programming?",
    "What is the difference between a process and a thread?", "What does Big O notation mean?",
    "How do I undo the last commit in git?", "What is a virtual environment in Python and why use one?",
]
IDEA_TOPICS = [
    "a rainy afternoon with kids", "a birthday present for my dad", "a school science fair project",
    "a healthy breakfast", "a team-building activity at work", "a cheap date night", "a short story plot",
    "a name for a coffee shop", "a weekend hobby", "things to do in winter", "a theme for a party",
    "ways to reduce plastic at home", "a mobile app for students", "a podcast episode about history",
]
IDEA_TEMPLATES = ["Give me five ideas for {t}.", "Suggest some ideas for {t}.", "List three ideas for {t}."]
REWRITES = [
    "Rewrite this sentence to sound more formal: 'Hey, can you send me the file asap?'",
    "Fix the grammar in this sentence: 'Me and him goes to the store every days.'",
    "Make this sentence shorter: 'Due to the fact that it was raining, we made the decision to stay inside.'",
    "Rewrite this in a friendlier tone: 'Your request has been denied.'",
    "Summarize in one sentence: 'The meeting covered the budget, the new hires and the office move.'",
    "Turn this into a bulleted list: eggs, milk, bread, apples and cheese.",
    "Paraphrase: 'The early bird catches the worm.'",
    "Rewrite this sentence in the passive voice: 'The cat chased the mouse.'",
]
NUMBERS = [(120, 2), (300, 4), (90, 1.5), (450, 5), (60, 0.5), (250, 2.5)]
MATH = ([f"A train travels {d} km in {h} hours. What is its average speed?" for d, h in NUMBERS]
        + [f"What is {a} percent of {b}?" for a, b in ((15, 80), (20, 250), (35, 140), (8, 50))]
        + [f"If a shirt costs {c} dollars and is {p} percent off, what is the new price?" for c, p in ((40, 25), (60, 10), (25, 20))]
        + ["How many minutes are there in a week?", "What is the square root of 144?",
           "Solve for x: 3x + 5 = 20.", "What is the area of a circle with a radius of 3 cm?"])
CITIES = ["Paris", "Tokyo", "Rome", "New York", "Barcelona", "Kyoto", "Amsterdam", "Edinburgh", "Prague",
          "Istanbul", "Vienna", "Seoul", "Mexico City", "Copenhagen"]
TRAVEL_TEMPLATES = ["What should I see in {c} in two days?", "What food should I try in {c}?",
                    "What is the best time of year to visit {c}?"]


def all_prompts() -> list[str]:
    """Every prompt, deduplicated, in a fixed order."""
    out = []
    for tmpl, task in itertools.product(CODE_TEMPLATES, CODE_TASKS):
        lang = LANGUAGES[int(hashlib.sha256((tmpl + task).encode()).hexdigest(), 16) % len(LANGUAGES)]
        out.append(tmpl.format(lang=lang, task=task))
    out += [t.format(s=s) for t, s in itertools.product(EXPLAIN_TEMPLATES + WRITING, SUBJECTS)]
    out += EVERYDAY
    out += [f"Compare {a} and {b}." for a, b in COMPARE]
    out += [f"What are the differences between {a} and {b}?" for a, b in COMPARE]
    out += [t.format(d=d) for t, d in itertools.product(HOW_TEMPLATES, DEVICES)]
    out += [t.format(s=s) for t, s in itertools.product(ADVICE_TEMPLATES, SITUATIONS)]
    out += MESSAGES + CODE_SNIPPETS + REWRITES + MATH
    out += [t.format(t=t_) for t, t_ in itertools.product(IDEA_TEMPLATES, IDEA_TOPICS)]
    out += [t.format(c=c) for t, c in itertools.product(TRAVEL_TEMPLATES, CITIES)]
    return list(dict.fromkeys(out))


def split(prompt: str, heldout_mod: int = 20) -> str:
    """'heldout' for about one prompt in `heldout_mod` (by a hash of its text), else 'train'."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    return "heldout" if h % heldout_mod == 0 else "train"


def prompts(which: str, seed: int = 0, pool: list[str] | None = None) -> list[str]:
    """The 'train' or 'heldout' prompts of `pool` (default: all_prompts()), shuffled by `seed` (training
    order), or in order for seed=None."""
    chosen = [p for p in (all_prompts() if pool is None else pool) if split(p) == which]
    if seed is not None:
        random.Random(seed).shuffle(chosen)
    return chosen


if __name__ == "__main__":
    print(len(all_prompts()), len(prompts("train")), len(prompts("heldout")))
