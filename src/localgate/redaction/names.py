"""PERSON and CN_ADDRESS: people's names and postal addresses, Chinese and English.

Chinese text is segmented and part-of-speech tagged by jieba (``rjieba``, the Rust
port, with the dictionary its package ships — nothing is downloaded). A word tagged as
a person's name counts when it starts with a Chinese surname; an address is a run of
place words (``北京市``, ``朝阳区``) continued through road, number and building words
and trimmed back to its last address-ending word (``号``, ``室``, ``栋`` …). English
names and street addresses are found by patterns with titles, cue words and a list of
common first names. How well this works is measured in docs/redaction-quality.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from itertools import compress, count
from operator import itemgetter

from localgate.redaction.findings import Finding
from localgate.redaction.recognizers import Scan, matches_at, occurrences

__all__ = ["NameRecognizer"]

_CJK = re.compile(r"[\u4e00-\u9fff]")

# The most common single-character surnames (covering well over 90% of the population)
# and the compound surnames still in use.
_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛"
    "郝龚邵万钱严覃武戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦"
    "俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房"
    "滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应"
    "臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
)
_COMPOUND_SURNAMES = frozenset(
    {"欧阳", "司马", "诸葛", "上官", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文",
     "司徒", "夏侯", "令狐", "端木", "独孤", "南宫", "西门", "百里", "呼延", "轩辕"}
)  # fmt: skip
_NAME_TAGS = frozenset({"nr", "nrfg", "nrt"})
# Words jieba tags as names that are far more often ordinary words.
_NOT_NAMES = frozenset(
    {"高明", "金山", "武汉", "文明", "方便", "明白", "高兴", "安全", "常规", "谢谢", "于是", "万一",
     "方向", "常常", "安静", "江湖", "包括", "成功", "成本", "成都", "程序", "龙头", "黄金", "白色",
     "荣耀", "黄金周", "阳光", "高新", "金融", "文化", "高端", "高速", "明天", "明年", "周末",
     "周年", "温度", "温馨", "华为", "平安", "康复", "安装", "常见", "史上", "严重", "包装"}
)  # fmt: skip
# jieba's HMM sometimes glues the next verb or particle onto a name (张伟住, 李娜说): a
# three-character "name" ending in one of these is cut back to two characters.
_GLUED = frozenset(
    "住在说和是的了也都就要会来去到把被给让对向从跟与及等请问称讲写打发告叫反投致办咨询申表希需想"
    "已曾将还又再能可于先女小经老医主同使登用确签"
)
# Roles that introduce a name (客户彭志强, 联系人：欧阳娜娜) and titles that follow one.
_NAME_CUES = (
    "客户", "用户", "患者", "病人", "联系人", "姓名", "员工", "经办人", "申请人", "收件人",
    "收货人", "负责人", "投诉人", "家属", "学生", "持卡人", "被保险人", "乘客", "住户", "业主",
    "租客", "车主", "发件人", "兹证明", "联系", "致", "签名", "法人", "法定代表人", "审批人",
    "经手人", "司机", "房东", "户主", "本人", "Hi", "您好",
)  # fmt: skip
_TITLES_AFTER = ("先生", "女士", "小姐", "老师", "经理", "医生", "主任", "教授", "同学", "总监")
_ORGANISATION_WORDS = ("公司", "集团", "有限", "物流", "科技", "银行", "医院", "学校", "大学")
_NOT_PERSON_ENDINGS = (
    "大厦", "广场", "中心", "公司", "集团", "银行", "医院", "学校", "大学", "路", "街", "区", "市",
    "省", "县", "镇", "村", "店", "厂", "局", "部", "所",
)  # fmt: skip

_ADMIN_SUFFIXES = ("省", "市", "区", "县", "州", "自治区", "特别行政区", "新区", "盟", "旗")
_PROVINCES = (
    "北京", "天津", "上海", "重庆", "河北", "山西", "辽宁", "吉林", "黑龙江", "江苏", "浙江",
    "安徽", "福建", "江西", "山东", "河南", "湖北", "湖南", "广东", "海南", "四川", "贵州",
    "云南", "陕西", "甘肃", "青海", "台湾", "内蒙古", "广西", "西藏", "宁夏", "新疆", "香港",
    "澳门",
)  # fmt: skip
# Words that may end an address, and the suffixes that make a word address-like.
_ADDRESS_ENDINGS = (
    "号", "室", "层", "楼", "栋", "幢", "座", "单元", "弄", "巷", "胡同", "路", "街", "大道", "村",
    "小区", "大厦", "广场", "公寓", "花园", "中心", "苑", "段",
)  # fmt: skip
_ADDRESS_JOINERS = frozenset({"-", "#"})  # text arrives width-folded
# Words that end an address run even though they are Chinese words.
_ADDRESS_STOPS = frozenset(
    {"的", "和", "与", "及", "或", "是", "在", "到", "了", "给", "请", "电话", "手机"}
)
_MAX_ADDRESS = 60

_EN_FIRST_NAMES = (
    "James|John|Robert|Michael|William|David|Richard|Joseph|Thomas|Charles|Christopher|Daniel|"
    "Matthew|Anthony|Mark|Donald|Steven|Paul|Andrew|Joshua|Kenneth|Kevin|Brian|George|Timothy|"
    "Ronald|Edward|Jason|Jeffrey|Ryan|Jacob|Gary|Nicholas|Eric|Jonathan|Stephen|Larry|Justin|Scott|"
    "Brandon|Benjamin|Samuel|Gregory|Alexander|Frank|Patrick|Raymond|Jack|Dennis|Jerry|Tyler|Aaron|"
    "Henry|Peter|Adam|Nathan|Zachary|Douglas|Kyle|Noah|Ethan|Jeremy|Walter|Christian|Keith|Roger|"
    "Terry|Austin|Sean|Gerald|Carl|Harold|Dylan|Arthur|Lawrence|Jordan|Jesse|Bryan|Billy|Bruce|"
    "Gabriel|Joe|Logan|Albert|Willie|Alan|Eugene|Russell|Vincent|Philip|Bobby|Johnny|Bradley|Oliver|"
    "Lucas|Liam|Mason|Mary|Patricia|Jennifer|Linda|Elizabeth|Barbara|Susan|Jessica|Sarah|Karen|"
    "Lisa|Nancy|Betty|Margaret|Sandra|Ashley|Kimberly|Emily|Donna|Michelle|Carol|Amanda|Dorothy|"
    "Melissa|Deborah|Stephanie|Rebecca|Sharon|Laura|Cynthia|Kathleen|Amy|Angela|Shirley|Anna|"
    "Brenda|Pamela|Emma|Nicole|Helen|Samantha|Katherine|Christine|Debra|Rachel|Carolyn|Janet|"
    "Catherine|Maria|Heather|Diane|Ruth|Julie|Olivia|Joyce|Virginia|Victoria|Kelly|Lauren|Christina|"
    "Joan|Evelyn|Judith|Megan|Andrea|Cheryl|Hannah|Jacqueline|Martha|Gloria|Teresa|Ann|Sara|"
    "Madison|Frances|Kathryn|Janice|Jean|Abigail|Alice|Julia|Judy|Sophia|Grace|Denise|Amber|"
    "Doris|Marilyn|Danielle|Beverly|Isabella|Theresa|Diana|Natalie|Brittany|Charlotte|Marie|"
    "Kayla|Alexis|Lori|Ava|Mia|Chloe|Ella|Lily|Zoe|Wei|Li|Ming|Hui|Jing|Yan|Lei|Hans|Anna|Pierre|"
    "Marco|Luca|Giulia|Sofia|Carlos|Juan|Jose|Ana|Lucia|Ahmed|Mohammed|Fatima|Yuki|Hiroshi|Kenji|"
    "Sophie|Priya|Mei|Raj|Arjun|Ananya|Rohan|Aisha|Omar|Hassan|Leila|Chen|Ling|Xin|Jun|Tao|Feng|"
    "Hao|Sakura|Haruto|Min|Ji|Seo|Hyun|Linh|Anh|Ivan|Olga|Dmitri|Elena|Sergei|Lars|Ingrid|Sven|"
    "Emil|Noor|Zara|Leo|Max|Finn|Ben|Sam|Tom|Tim|Jim|Bob|Bill|Kate|Lucy|Molly|Ellie|Ruby|Amelia|"
    "Harper|Aria|Scarlett|Layla|Nora|Hazel|Violet|Aurora|Stella|Claire|Paula|Diego|Mateo|"
    "Santiago|Valentina|Camila|Isabel|Gabriela|Fernando|Ricardo|Pedro"
)
_CAP = r"[A-Z][a-z]+(?:[-'][A-Z][a-z]+)?"
# One to three capitalised words: the candidates for an English name.
_EN_CANDIDATE = re.compile(
    r"[A-Z](?<![A-Za-z][A-Z])[a-z]+(?:[-'][A-Z][a-z]+)?(?:(?: [A-Z]\.)?[ ]" + _CAP + r"){0,3}\b"
)
_TITLE_BEFORE = re.compile(r"\b(?:Mr|Mrs|Ms|Miss|Dr|Prof|Sir|Madam)\.?\s+$")
_EN_CUES = frozenset(
    {"name", "customer", "patient", "client", "employee", "contact", "dear", "signed", "attn",
     "applicant", "cardholder", "insured", "tenant", "guest", "passenger", "user"}
)  # fmt: skip
_CUE_BEFORE = re.compile(
    r"\b(?:name|customer|patient|client|employee|contact|dear|signed|attn|applicant|"
    r"cardholder|insured|tenant|guest|passenger|user)\b[\s:,-]+$"
)
_FIRST_NAMES = frozenset(_EN_FIRST_NAMES.split("|"))
_TITLES = frozenset({"Mr", "Mrs", "Ms", "Miss", "Dr", "Prof", "Sir", "Madam", "Dear"})
_EN_NOT_SURNAMES = frozenset(
    {"Street", "Road", "Avenue", "Lane", "Drive", "Team", "Support", "Inc", "Ltd", "Corp", "Monday",
     "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "The", "And", "From"}
)  # fmt: skip
_EN_ADDRESS = re.compile(
    r"[0-9](?<![0-9A-Za-z][0-9])[0-9]{0,5}\s+(?:[A-Z][A-Za-z]+\s+){1,4}"
    r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Parkway|Pkwy|"
    r"Place|Pl|Square|Sq|Terrace|Highway|Hwy|Circle|Trail)\b\.?"
    r"(?:,?\s+(?:Suite|Ste|Apt|Unit|Floor|Fl|#)\.?\s*[A-Za-z0-9-]+)?"
    r"(?:,\s+[A-Z][a-z]+(?:\s+[A-Z][a-z]+){0,2})?"
    r"(?:,\s+[A-Z]{2}(?:\s+\d{5}(?:-\d{4})?)?)?"
)


class NameRecognizer:
    """Finds PERSON and CN_ADDRESS spans."""

    def find(self, scan: Scan) -> Iterator[Finding]:
        """Names and addresses in the text."""
        text = scan.folded
        if _CJK.search(text):
            yield from _chinese(text)
        if re.search(r"[A-Z][a-z]", text):
            yield from _english(text)


@cache
def _tagger() -> object:
    import rjieba

    return rjieba


def _tokens(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, word, tag) for every jieba token, with offsets into ``text``."""
    tagged: list[tuple[str, str]] = _tagger().tag(text)  # type: ignore[attr-defined]
    tokens = []
    position = 0
    if sum(len(word) for word, _ in tagged) == len(text):
        # The usual case: the words are the text, cut into pieces.
        for word, tag in tagged:
            end = position + len(word)
            tokens.append((position, end, word, tag))
            position = end
        return tokens
    for word, tag in tagged:
        start = text.find(word, position)
        if start < 0:  # the tagger changed the text somehow; resynchronise on the next word
            continue
        position = start + len(word)
        tokens.append((start, position, word, tag))
    return tokens


def _chinese(text: str) -> Iterator[Finding]:
    tokens = _tokens(text)
    yield from _chinese_people(tokens)
    yield from _cued_people(text, tokens)
    yield from _chinese_addresses(tokens)


@cache
def _cued_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    surname = (
        "(?:" + "|".join(sorted(_COMPOUND_SURNAMES)) + "|[" + "".join(sorted(_SURNAMES)) + "])"
    )
    after_cue = re.compile(
        "(?:" + "|".join(_NAME_CUES) + r")[：:\s]{0,2}(" + surname + r"[\u4e00-\u9fff]{1,2})"
    )
    before_title = re.compile(
        "(" + surname + r"[\u4e00-\u9fff]{1,2}?)(?:" + "|".join(_TITLES_AFTER) + ")"
    )
    return after_cue, before_title


def _cued_people(text: str, tokens: list[tuple[int, int, str, str]]) -> Iterator[Finding]:
    """Names the segmenter missed, found by a role before them or a title after them."""
    word_starts: set[int] | None = None  # made for the first match: most texts have none
    after_cue, before_title = _cued_patterns()
    # A name before a title starts two to four characters before it (a surname of one
    # or two, a given name of one or two): the pattern is tried only there, not at every
    # surname character.
    titled = {
        at - length
        for at in occurrences(text, _TITLES_AFTER)
        for length in (2, 3, 4)
        if at >= length
    }
    for matches, score in (
        (after_cue.finditer(text), 0.85),
        (matches_at(before_title, text, sorted(titled)), 0.8),
    ):
        for match in matches:
            name = match.group(1)
            start = match.start(1)
            # A name starts a word: 担任产品经理 has no 任产品 in it.
            if word_starts is None:
                word_starts = {token[0] for token in tokens}
            if start not in word_starts:
                continue
            while len(name) > 2 and name[-1] in _GLUED:
                name = name[:-1]
            if name in _NOT_NAMES or name.endswith(_NOT_PERSON_ENDINGS):
                continue
            if any(word in text[start : start + len(name) + 8] for word in _ORGANISATION_WORDS):
                continue  # 成都锦程物流有限公司 is a company
            yield Finding(start, start + len(name), "PERSON", score)


def _chinese_people(tokens: list[tuple[int, int, str, str]]) -> Iterator[Finding]:
    for index, (start, end, word, tag) in enumerate(tokens):
        # jieba splits compound surnames off as place words: 欧阳 + 娜娜.
        if word in _COMPOUND_SURNAMES and index + 1 < len(tokens):
            next_start, next_end, next_word, next_tag = tokens[index + 1]
            joined = next_start == end and 1 <= len(next_word) <= 2 and _CJK.match(next_word)
            if joined and next_tag not in ("x", "uj", "ul", "p", "c", "d", "r", "v"):
                yield Finding(start, next_end, "PERSON", 0.85)
                continue
        if tag not in _NAME_TAGS:
            continue
        if len(word) == 3 and word[-1] in _GLUED and word[:2] not in _COMPOUND_SURNAMES:
            word, end = word[:2], end - 1
        if word in _NOT_NAMES or not 2 <= len(word) <= 4 or len(set(word)) == 1:
            continue
        if word.endswith(_NOT_PERSON_ENDINGS):
            continue
        has_surname = word[:2] in _COMPOUND_SURNAMES or word[0] in _SURNAMES
        if has_surname and all("\u4e00" <= char <= "\u9fff" for char in word):
            yield Finding(start, end, "PERSON", 0.8 if len(word) > 2 else 0.75)


def _chinese_addresses(tokens: list[tuple[int, int, str, str]]) -> Iterator[Finding]:
    index = 0  # the first token not yet inside an address
    # An address starts at a place word: the others are skipped without a Python loop.
    for place in compress(count(), map("ns".__eq__, map(itemgetter(3), tokens))):
        if place < index:
            continue
        index = place
        start, _, word, _ = tokens[index]
        if not (word.endswith(_ADMIN_SUFFIXES) or word.startswith(_PROVINCES)):
            index += 1
            continue
        last_ending = None
        cursor = index + 1
        while cursor < len(tokens):
            _, token_end, token_word, _ = tokens[cursor]
            if token_end - start > _MAX_ADDRESS:
                break
            # Road and building names take every part of speech (高新路, 珞喻路, 五常大道):
            # any word or number continues the address; the span is cut back to its
            # last address-ending word afterwards.
            addressy = (
                _CJK.match(token_word) is not None
                or token_word.isalnum()
                or token_word in _ADDRESS_JOINERS
            )
            if not addressy or token_word in _ADDRESS_STOPS:
                break
            if token_word.endswith(_ADDRESS_ENDINGS):
                last_ending = cursor
            cursor += 1
        if last_ending is not None:
            yield Finding(start, tokens[last_ending][1], "CN_ADDRESS", 0.85)
            index = last_ending + 1
        else:
            index += 1


def _english(text: str) -> Iterator[Finding]:
    for match in _EN_CANDIDATE.finditer(text):
        words = [word for word in match.group().split(" ") if not word.endswith(".")]
        offset = 0
        # "Customer Patricia King": the cue word is not part of the name.
        while words and (words[0].lower() in _EN_CUES or words[0] in _TITLES):
            offset = match.group().index(words[1]) if len(words) > 1 else len(match.group())
            words = words[1:]
        while words and words[-1] in _EN_NOT_SURNAMES:
            words.pop()
        if not words or words[0] in _EN_NOT_SURNAMES or words[0] in _TITLES:
            continue
        start = match.start() + offset
        before = text[max(0, start - 16) : start]
        # A title vouches even for one word ("Mr. Smith"); otherwise two or more words,
        # the first a common first name or right after a cue word ("customer: …").
        titled = _TITLE_BEFORE.search(before) is not None
        named = words[0] in _FIRST_NAMES or _CUE_BEFORE.search(before.lower()) is not None
        if not titled and (len(words) < 2 or not named):
            continue
        end = match.start() + match.group().rfind(words[-1]) + len(words[-1])
        yield Finding(start, end, "PERSON", 0.8)
    for match in _EN_ADDRESS.finditer(text):
        yield Finding(match.start(), match.end(), "CN_ADDRESS", 0.85)
