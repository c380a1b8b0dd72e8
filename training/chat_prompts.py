"""Chat prompts for distilling the SmolLM2 draft: templates x subjects, deterministic, split by a hash.

The target answers these prompts itself (greedy and sampled); the draft is distilled on those answers with the
target's own logits. A prompt's split is a hash of its text, so adding prompts never moves an old one. The
held-out split is shipped with the pair (`exactspec/smollm2_pair/prompts.json`) for the demo and the bench;
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
    return list(dict.fromkeys(out))


def split(prompt: str, heldout_mod: int = 20) -> str:
    """'heldout' for about one prompt in `heldout_mod` (by a hash of its text), else 'train'."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    return "heldout" if h % heldout_mod == 0 else "train"


def prompts(which: str, seed: int = 0) -> list[str]:
    """The 'train' or 'heldout' prompts, shuffled by `seed` (training order), or in order for seed=None."""
    chosen = [p for p in all_prompts() if split(p) == which]
    if seed is not None:
        random.Random(seed).shuffle(chosen)
    return chosen


if __name__ == "__main__":
    print(len(all_prompts()), len(prompts("train")), len(prompts("heldout")))
