"""The live corpus: real documents built from the standard library's docstrings, plus Russian and Chinese ones.

The docstrings are read in a separate Python process (importing ~200 modules has side effects the benchmark
should not carry). The same interpreter and the same ordering give the same corpus on every run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from devtools import openwebui_local
from devtools.openwebui_local import Instance

DOC_MAX_CHARS = 6_000
DOC_MIN_CHARS = 600
SEED_CONCURRENCY = 8

_EXTRACT = r"""
import contextlib, importlib, inspect, io, json, pkgutil, sys, warnings

SKIP = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "lib2to3", "pydoc_data", "test",
        "ensurepip", "msilib", "winreg", "winsound", "msvcrt", "nt", "readline", "curses", "distutils", "venv"}
count, max_chars, min_chars = (int(a) for a in sys.argv[1:4])

def load(name):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return importlib.import_module(name)

def names():
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in SKIP:
            continue
        try:
            module = load(name)
        except Exception:
            continue
        yield name, module
        for info in getattr(module, "__path__", None) and pkgutil.iter_modules(module.__path__) or ():
            if not info.name.startswith("_") and "test" not in info.name:
                try:
                    yield f"{name}.{info.name}", load(f"{name}.{info.name}")
                except Exception:
                    continue

def document(name, module):
    parts = [f"# {name}", inspect.getdoc(module) or ""]
    public = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for member in sorted(set(public)):
        obj = getattr(module, member, None)
        if obj is None or not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if getattr(obj, "__module__", None) not in (name, None):
            continue
        doc = inspect.getdoc(obj)
        if doc:
            parts.append(f"## {member}\n\n{doc}")
        if sum(map(len, parts)) > max_chars:
            break
    return "\n\n".join(parts)[:max_chars]

out = []
for name, module in names():
    text = document(name, module)
    if len(text) >= min_chars:
        out.append({"name": name, "text": text})
    if len(out) >= count:
        break
sys.stdout.write(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class Document:
    title: str
    filename: str
    text: str
    language: str


@dataclass
class Corpus:
    """What was seeded: the bases (name -> id) and each document's file id."""

    bases: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # title -> file_id
    languages: dict[str, int] = field(default_factory=dict)

    @property
    def base_ids(self) -> list[str]:
        return list(self.bases.values())


def stdlib_documents(count: int) -> list[Document]:
    """`count` markdown documents, one per standard-library module, from its docstrings."""
    done = subprocess.run(
        [sys.executable, "-c", _EXTRACT, str(count), str(DOC_MAX_CHARS), str(DOC_MIN_CHARS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    found = json.loads(done.stdout)
    if len(found) < count:
        raise RuntimeError(f"only {len(found)} standard-library modules have enough documentation (wanted {count})")
    return [
        Document(title=f"Python module {d['name']}", filename=f"stdlib-{d['name']}.md", text=d["text"], language="en")
        for d in found
    ]


MULTILINGUAL = [
    Document(
        "Резервное копирование баз знаний",
        "backup-ru.md",
        "# Резервное копирование баз знаний\n\n"
        "Базы знаний Open WebUI хранят документы и их векторные представления. Резервную копию делают каждую ночь: "
        "сначала останавливают запись, затем копируют каталог данных и базу векторов, после чего снова разрешают "
        "запись. Копии хранятся четырнадцать дней.\n\n"
        "## Восстановление\n\n"
        "Чтобы восстановить базу, остановите сервер, замените каталог данных копией и запустите сервер снова. "
        "После восстановления проверьте поиск: запрос по известному документу должен находить его первым.",
        "ru",
    ),
    Document(
        "Асинхронный ввод-вывод в Python",
        "asyncio-ru.md",
        "# Асинхронный ввод-вывод в Python\n\n"
        "Модуль asyncio позволяет выполнять много сетевых запросов одновременно в одном потоке. Корутина "
        "объявляется словом async, а ожидание результата записывается через await. Цикл событий переключается "
        "между задачами, пока одна из них ждёт ответа от сети.\n\n"
        "## Ограничение параллелизма\n\n"
        "Семафор ограничивает число одновременных запросов: это бережёт сервер и не даёт исчерпать соединения. "
        "Функция gather запускает задачи вместе и возвращает их результаты в исходном порядке.",
        "ru",
    ),
    Document(
        "Метеостанция на крыше",
        "weather-ru.md",
        "# Метеостанция на крыше\n\n"
        "Датчики температуры, влажности и давления передают измерения каждые пять минут. Скорость ветра "
        "измеряет анемометр, направление ветра показывает флюгер. Данные за сутки сводятся в отчёт: минимальная и "
        "максимальная температура, сумма осадков и средняя скорость ветра.\n\n"
        "Зимой датчик осадков подогревается, чтобы снег таял и учитывался как вода.",
        "ru",
    ),
    Document(
        "知识库的备份与恢复",
        "backup-zh.md",
        "# 知识库的备份与恢复\n\n"
        "Open WebUI 的知识库保存文档及其向量。每天夜里进行一次备份：先暂停写入，再复制数据目录和向量数据库，"
        "最后恢复写入。备份保留十四天。\n\n"
        "## 恢复\n\n"
        "恢复知识库时，先停止服务，用备份替换数据目录，然后重新启动服务。恢复之后请检查搜索：用已知文档的内容"
        "查询，应当首先找到该文档。",
        "zh",
    ),
    Document(
        "Python 中的异步编程",
        "asyncio-zh.md",
        "# Python 中的异步编程\n\n"
        "asyncio 模块可以在一个线程里同时处理许多网络请求。协程用 async 定义，用 await 等待结果。事件循环在"
        "任务等待网络响应时切换到其他任务。\n\n"
        "## 限制并发\n\n"
        "信号量可以限制同时进行的请求数量，既保护服务器，也避免连接耗尽。gather 函数同时运行多个任务，并按原来的"
        "顺序返回结果。",
        "zh",
    ),
    Document(
        "屋顶气象站",
        "weather-zh.md",
        "# 屋顶气象站\n\n"
        "温度、湿度和气压传感器每五分钟发送一次测量值。风速由风速计测量，风向由风向标显示。每天的数据汇总成"
        "报告：最低和最高气温、降水总量以及平均风速。\n\n"
        "冬天降水传感器会加热，使积雪融化并按水量计算。",
        "zh",
    ),
]

# Queries in the corpus's languages; the MCP call and the direct call of a pair always use the same one.
QUERIES = [
    "parse command line arguments and options",
    "compress and decompress data",
    "regular expression pattern matching",
    "read and write CSV files",
    "serialize Python objects to JSON",
    "run a subprocess and capture its output",
    "calendar dates and time zones",
    "send an email message over SMTP",
    "thread synchronization with locks and events",
    "hash functions and message digests",
    "как сделать резервную копию базы знаний",
    "ограничение числа одновременных запросов",
    "如何恢复知识库",
    "气象站 风速 测量",
]


def seed(inst: Instance, documents: list[Document], bases: int) -> Corpus:
    """Create `bases` bases for the English documents (round robin) plus one for the others; upload and attach
    every document with some concurrency. Each upload waits until Open WebUI has processed the file."""
    corpus = Corpus()
    english = [d for d in documents if d.language == "en"]
    other = [d for d in documents if d.language != "en"]
    names = [f"Python standard library, part {n + 1}" for n in range(bases)]
    for name in names:
        corpus.bases[name] = openwebui_local.create_knowledge(inst, name, "Docstrings of standard-library modules")
    if other:
        corpus.bases["Multilingual"] = openwebui_local.create_knowledge(
            inst, "Multilingual", "Многоязычные документы / 多语言文档"
        )
    plan = [(corpus.bases[names[n % bases]], d) for n, d in enumerate(english)]
    plan += [(corpus.bases["Multilingual"], d) for d in other]

    def one(item: tuple[str, Document]) -> tuple[str, str]:
        knowledge_id, document = item
        metadata = {"title": document.title, "source": document.filename}
        fid = openwebui_local.upload_text(inst, document.filename, document.text, metadata)
        openwebui_local.add_file(inst, knowledge_id, fid)
        return document.title, fid

    with ThreadPoolExecutor(SEED_CONCURRENCY) as pool:
        for title, fid in pool.map(one, plan):
            corpus.files[title] = fid
    for document in documents:
        corpus.languages[document.language] = corpus.languages.get(document.language, 0) + 1
    return corpus
