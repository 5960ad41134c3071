# ruff: noqa: E501
"""Templates of the PII corpus (rendered by ``bench.pii.generate``).

Slot syntax: ``«TYPE»`` / ``«TYPE:variant»`` an entity to detect, ``«~kind»`` a hard
negative, ``«~kind=literal»`` a literal hard negative, ``«$name»`` unlabelled filler.
Label conventions (see docs/redaction-quality.md): a PERSON span is the name alone
(``«PERSON»先生``, ``Dr. «PERSON»``), an address span runs from its first administrative unit
to its last unit, phone spans include ``+86`` and separators.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TEMPLATES", "Template"]


@dataclass(frozen=True)
class Template:
    kind: str
    lang: str
    text: str | Callable[[random.Random], str]
    count: int = 6


def _t(
    kind: str, lang: str, text: str | Callable[[random.Random], str], count: int = 6
) -> Template:
    return Template(kind, lang, text, count)


# --- CSV payloads built row by row ---------------------------------------------------------


def _csv_roster(rng: random.Random) -> str:
    rows = ["姓名,手机,身份证号,部门,入职日期"]
    for _ in range(rng.randint(2, 4)):
        rows.append("«PERSON»,«CN_MOBILE:plain»,«CN_RESIDENT_ID»,«$dept»,«~date»")
    return "\n".join(rows)


def _csv_orders(rng: random.Random) -> str:
    rows = ["订单号,下单时间,金额,快递单号,收件人,电话,地址"]
    for _ in range(rng.randint(2, 4)):
        rows.append(
            "«~order_no»,«~datetime»,«~price:plain»,«~tracking»,«PERSON»,«CN_MOBILE»,«CN_ADDRESS»"
        )
    return "\n".join(rows)


def _csv_customers(rng: random.Random) -> str:
    rows = ["name,email,phone,card,amount"]
    for _ in range(rng.randint(2, 4)):
        rows.append("«PERSON»,«EMAIL»,«CN_MOBILE:intl»,«CREDIT_CARD:plain»,«~price:plain»")
    return "\n".join(rows)


def _csv_metrics(rng: random.Random) -> str:
    rows = ["sku,order_id,amount,ts_ms,tracking,build"]
    for _ in range(rng.randint(3, 5)):
        rows.append("«~product_code»,«~order_no»,«~amount»,«~ts_ms»,«~tracking»,«~version:build»")
    return "\n".join(rows)


def _csv_logins(rng: random.Random) -> str:
    rows = ["id,姓名,mobile,email,ip,created_at"]
    for _ in range(rng.randint(2, 4)):
        ip = "«IPV4»" if rng.random() < 0.7 else "«IPV6»"
        rows.append(f"«~num_id»,«PERSON»,«CN_MOBILE:plain»,«EMAIL»,{ip},«~iso_ts»")
    return "\n".join(rows)


def _csv_finance(rng: random.Random) -> str:
    rows = ["发票代码,发票号码,开票日期,金额,税号"]
    for _ in range(rng.randint(2, 4)):
        rows.append("«~invoice12»,«~invoice8»,«~date»,«~amount»,«CN_USCC»")
    return "\n".join(rows)


def _csv_stock(rng: random.Random) -> str:
    rows = ["物料编码,批次号,库位,数量,入库时间"]
    for _ in range(rng.randint(3, 5)):
        rows.append("«~uscc_bad»,«~id_bad»,«~room»,«~small»,«~ts_s»")
    return "\n".join(rows)


TEMPLATES: tuple[Template, ...] = (
    # ---- customer-service tickets -----------------------------------------------------------
    _t(
        "cs_ticket",
        "zh",
        "客户«PERSON»来电反映订单«~order_no»未发货，联系电话«CN_MOBILE»，收货地址«CN_ADDRESS»。已转物流组跟进，快递单号«~tracking»。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "【工单#«~ticket»】用户«PERSON»（手机号«CN_MOBILE»）申请退款«~price»元，付款银行卡号«CN_BANK_CARD»，请财务于«~date»前处理。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "投诉记录：«PERSON»女士称其身份证号«CN_RESIDENT_ID»被他人冒用注册账号，邮箱«EMAIL»，希望尽快冻结。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "客服备注：客户«PERSON»，电话«CN_MOBILE:fw»，车牌号«CN_LICENSE_PLATE»，预约«~date»到店保养。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "用户反馈：支付金额«~amount»元显示异常，订单号«~order_no»，交易时间戳«~ts_ms»，请技术排查。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "客户«PERSON»先生来电咨询，座机«CN_LANDLINE»，手机«CN_MOBILE»，需要开具发票，公司统一社会信用代码：«CN_USCC»。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "退货申请：订单«~order_no»，商品编码«~product_code»，退款金额«~price»，物流单号«~tracking»，申请时间«~datetime»。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "港澳用户«PERSON»使用回乡证«CN_TRAVEL_PERMIT:hm»实名认证失败，联系电话«CN_MOBILE:intl»，请人工审核。",
        5,
    ),
    _t(
        "cs_ticket",
        "zh",
        "用户«PERSON»反馈护照号码«CN_PASSPORT»无法通过校验，出行日期«~date»，改签费«~price»元。",
        5,
    ),
    _t("cs_ticket", "zh", "香港客户«PERSON»的身份证«HK_ID»已核验，回访电话«CN_MOBILE:intl»。", 5),
    _t(
        "cs_ticket",
        "zh",
        "台湾客户«PERSON»，身份证字号«TW_ID»，邮箱«EMAIL»，要求寄送纸质发票到«CN_ADDRESS»。",
        5,
    ),
    _t(
        "cs_ticket",
        "zh",
        "工单状态：已解决。处理人工号«~staff_id»，耗时«~duration»，满意度评分4.8。关联订单«~order_no»，客服热线«~hotline»。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "客户说：我的卡号是«CN_BANK_CARD»，预留手机«CN_MOBILE»，为什么扣款了两次？金额都是«~price»元。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "请于«~date»前联系«PERSON»（«CN_MOBILE:dashed»）确认安装地址：«CN_ADDRESS»。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "会员«PERSON»申请往来港澳通行证«CN_TRAVEL_PERMIT:c»加急办理，邮寄至«CN_ADDRESS»，电话«CN_MOBILE»。",
        5,
    ),
    _t(
        "cs_ticket",
        "zh",
        "«~name_like=马上»帮您查询：订单«~order_no»已于«~datetime»签收，签收人为前台，«~name_like=周末»不派送。",
    ),
    _t(
        "cs_ticket",
        "en",
        "Ticket «~ticket»: customer «PERSON» reports a double charge on card «CREDIT_CARD». Contact: «EMAIL», phone «CN_MOBILE:intl». Order «~order_no», amount «~price».",
    ),
    _t(
        "cs_ticket",
        "en",
        "Refund request for order «~order_no» placed at «~datetime»; tracking «~tracking»; total «~price». No customer data attached.",
    ),
    _t(
        "cs_ticket",
        "en",
        "Hi team, «PERSON» from «$company_en» sent their IBAN «IBAN» for the wire transfer; please confirm with them at «EMAIL».",
    ),
    _t(
        "cs_ticket",
        "en",
        "Escalation: user «PERSON» cannot log in from «IPV4»; last session id «~uuid», client build «~version:v».",
    ),
    _t(
        "cs_ticket",
        "en",
        "Please call back Mr. «PERSON» on «CN_MOBILE:intl_spaced» regarding the renewal of passport «CN_PASSPORT».",
    ),
    _t(
        "cs_ticket",
        "en",
        "Ticket closed. Root cause: cache key collision in «~sk_word». Fixed in commit «~git_sha», shipped in «~version:v».",
    ),
    _t(
        "cs_ticket",
        "en",
        "Customer «PERSON» (SSN «US_SSN») asked us to update the billing address to «CN_ADDRESS:en».",
    ),
    _t(
        "cs_ticket",
        "mixed",
        "Hi «PERSON»，客户手机«CN_MOBILE:intl_spaced»，email: «EMAIL»，麻烦follow up一下order «~order_no»，thanks!",
    ),
    _t(
        "cs_ticket",
        "mixed",
        "【Urgent】用户«PERSON»的credit card «CREDIT_CARD» 被盗刷，请block，callback电话«CN_MOBILE»。",
    ),
    _t(
        "cs_ticket",
        "mixed",
        "客户reply说地址写错了，正确的是«CN_ADDRESS»，收件人«PERSON»，phone «CN_MOBILE:dashed»。",
    ),
    _t(
        "cs_ticket",
        "mixed",
        "FYI：这个case的order id是«~order_no»，payment amount «~amount»元 是系统bug，不是真实金额，trace id «~uuid»。",
    ),
    _t(
        "cs_ticket",
        "mixed",
        "用户«PERSON»的台胞证过期了，改用Taiwan ID «TW_ID»登记，另外香港ID «HK_ID»也上传了，请check。",
        4,
    ),
    _t(
        "cs_ticket",
        "zh",
        "车主«PERSON»，车牌«CN_LICENSE_PLATE»，违章短信通知手机«CN_MOBILE»，停车场入场时间«~datetime»，停车费«~price»元。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "请拨打办公室电话«CN_LANDLINE»或«CN_LANDLINE»联系«PERSON»主任，工作时间9:00-17:30。",
    ),
    _t(
        "cs_ticket",
        "zh",
        "香港居民«PERSON»，香港身份证«HK_ID»，回乡证«CN_TRAVEL_PERMIT:hm»，内地联系电话«CN_MOBILE»。",
    ),
    _t(
        "cs_ticket",
        "en",
        "Hong Kong resident «PERSON», HKID «HK_ID», phone «CN_MOBILE:intl_spaced», arriving on «~date»; Taiwan colleague «PERSON», ID «TW_ID».",
    ),
    _t(
        "cs_ticket",
        "mixed",
        "Parking log：«CN_LICENSE_PLATE» 进场«~datetime»，出场«~datetime»，fee «~price»元，车主电话«CN_LANDLINE»。",
    ),
    # ---- HR records -------------------------------------------------------------------------
    _t(
        "hr_record",
        "zh",
        "员工入职登记表\n姓名：«PERSON»\n性别：男\n身份证号：«CN_RESIDENT_ID»\n手机：«CN_MOBILE»\n邮箱：«EMAIL»\n现住址：«CN_ADDRESS»\n工资卡：«CN_BANK_CARD»\n入职日期：«~date»",
    ),
    _t(
        "hr_record",
        "zh",
        "离职证明：兹证明«PERSON»（身份证号码«CN_RESIDENT_ID»）自«~date»至«~date»在我司担任«$title»一职，特此证明。",
    ),
    _t(
        "hr_record",
        "zh",
        "薪资调整通知：员工«PERSON»，工号«~staff_id»，月薪由«~price»元调整为«~price»元，自«~date»起执行。",
    ),
    _t(
        "hr_record",
        "zh",
        "紧急联系人：«PERSON»（配偶），电话«CN_MOBILE:spaced»；备用联系人：«PERSON»，电话«CN_LANDLINE»。",
    ),
    _t(
        "hr_record",
        "zh",
        "外派人员«PERSON»护照号«CN_PASSPORT»，签证有效期至«~date»，港澳通行证«CN_TRAVEL_PERMIT:c»。",
        5,
    ),
    _t(
        "hr_record",
        "zh",
        "绩效面谈纪要：«PERSON»本季度目标完成率«~percent»，所在部门«$dept»，面谈人«PERSON»经理。",
    ),
    _t(
        "hr_record",
        "zh",
        "社保缴纳明细：缴费基数«~price»元，个人缴纳«~price»元，单位缴纳«~price»元，缴费月份«~month»，«~name_like=黄金周»加班费另计。",
    ),
    _t(
        "hr_record",
        "zh",
        "员工«PERSON»的公积金账户已转入，老身份证号«CN_RESIDENT_ID:15»，请档案室核对。",
        4,
    ),
    _t(
        "hr_record",
        "zh",
        "体检预约：«PERSON»，身份证«CN_RESIDENT_ID:fw»，预约日期«~date»，地点«CN_ADDRESS»。",
        4,
    ),
    _t(
        "hr_record",
        "zh",
        "年假统计：«$dept»共«~small»人，人均剩余«~small»天，批次号«~id_bad»，«~name_like=高铁»差旅补贴按«~price»元/次发放。",
    ),
    _t(
        "hr_record",
        "en",
        "Employee onboarding: «PERSON», SSN «US_SSN», email «EMAIL», home address «CN_ADDRESS:en». Start date «~date». Salary account IBAN «IBAN:spaced».",
    ),
    _t(
        "hr_record",
        "en",
        "Reference letter: «PERSON» worked with us from «~date» to «~date» as «$title_en». Please contact «PERSON» at «EMAIL» for details.",
    ),
    _t(
        "hr_record",
        "en",
        "Payroll batch «~batch» processed at «~datetime»: 248 records, total «~price», checksum «~sha256».",
    ),
    _t(
        "hr_record",
        "mixed",
        "新员工«PERSON»的onboarding资料：passport «CN_PASSPORT»，mobile «CN_MOBILE:intl»，laptop asset tag «~asset_tag»。",
    ),
    _t(
        "hr_record",
        "mixed",
        "HR系统导出：employee «PERSON:en»，SSN «US_SSN»，工资卡«CN_BANK_CARD»，紧急联系人«PERSON»«CN_MOBILE»。",
        5,
    ),
    # ---- medical records --------------------------------------------------------------------
    _t(
        "medical_record",
        "zh",
        "门诊病历\n患者：«PERSON»，女，«~age»岁\n身份证：«CN_RESIDENT_ID»\n联系电话：«CN_MOBILE»\n主诉：反复咳嗽两周。\n诊断：急性支气管炎。\n处方：阿莫西林胶囊0.5g tid×7天。\n就诊日期：«~date»",
    ),
    _t(
        "medical_record",
        "zh",
        "住院登记：«PERSON»，床号«~bed»，住院号«~inpatient_no»，家属«PERSON»（电话«CN_MOBILE»），家庭住址«CN_ADDRESS»。",
    ),
    _t(
        "medical_record",
        "zh",
        "检验报告单 样本号«~sample_no» 白细胞计数6.5×10^9/L 血红蛋白132g/L 报告时间«~datetime» 审核：检验科",
    ),
    _t(
        "medical_record",
        "zh",
        "体检中心通知：«PERSON»您好，您的体检报告已生成，编号«~report_no»，请登录查看，如有疑问请拨打«CN_LANDLINE»。",
    ),
    _t(
        "medical_record",
        "zh",
        "转诊单：患者«PERSON»，港澳居民来往内地通行证«CN_TRAVEL_PERMIT:hm»，转入«$hospital»心内科，联系人电话«CN_MOBILE»。",
        5,
    ),
    _t(
        "medical_record",
        "zh",
        "处方流转记录：处方号«~order_no»，开具时间«~ts_ms»，药品费用«~price»元，医保统筹支付«~percent»。",
    ),
    _t(
        "medical_record",
        "en",
        "Patient: «PERSON», DOB «~date», MRN «~mrn». Seen by Dr. «PERSON» for follow-up. Phone «CN_MOBILE:intl». Address: «CN_ADDRESS:en».",
    ),
    _t(
        "medical_record",
        "en",
        "Lab result «~sample_no»: HbA1c 6.1%, LDL 3.2 mmol/L, collected «~datetime». Device firmware version «~version:ip». No identifiers.",
    ),
    _t(
        "medical_record",
        "mixed",
        "病人«PERSON» MRI report已上传，accession no. «~accession»，请Dr. «PERSON:en» review，联系方式«EMAIL»。",
    ),
    # ---- sales reports ----------------------------------------------------------------------
    _t(
        "sales_report",
        "zh",
        "2024年一季度华南区销售报告：总销售额«~amount»元，同比增长«~percent»，客单价«~price»元，大客户订单«~order_no»贡献最大。",
    ),
    _t(
        "sales_report",
        "zh",
        "重点客户：«$company»，统一社会信用代码«CN_USCC»，对接人«PERSON»，电话«CN_MOBILE»，开户账号«CN_BANK_CARD»。",
    ),
    _t(
        "sales_report",
        "zh",
        "本月回款明细：发票代码«~invoice12»，发票号码«~invoice8»，金额«~price»元，到账时间«~datetime»，全电发票号码«~invoice20»。",
    ),
    _t(
        "sales_report",
        "zh",
        "销售«PERSON»本月业绩«~price»万元，排名第«~small»，拜访客户«PERSON»（«$company»）三次，«~name_like=王者荣耀»联名款«$product»卖断货。",
    ),
    _t(
        "sales_report",
        "zh",
        "渠道对账：«$product»出货«~small»千台，SKU «~product_code»，平均售价«~price»元，物料编码«~uscc_bad»。",
    ),
    _t(
        "sales_report",
        "en",
        "Q3 pipeline: 42 deals, total value «~price», win rate «~percent». Top SKU «~product_code». Report generated «~datetime».",
    ),
    _t(
        "sales_report",
        "en",
        "Deal memo: «$company_en» signed; billing contact «PERSON» <«EMAIL»>, card on file «CREDIT_CARD:spaced», billing address «CN_ADDRESS:en».",
    ),
    _t(
        "sales_report",
        "en",
        "Wire received from «$company_en»: reference «~invoice_en», IBAN «IBAN», amount «~price». Previous attempt used «~iban_bad» and bounced.",
    ),
    _t(
        "sales_report",
        "mixed",
        "Q2 review：GMV «~amount»元，top seller «PERSON»，客户«$company»的PO number «~po»，invoice «~invoice_en»。",
    ),
    # ---- application logs -------------------------------------------------------------------
    _t(
        "app_log",
        "en",
        "«~datetime» INFO  [order-service] created order id=«~order_no» amount=«~amount» trace=«~uuid»",
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» WARN  [auth] login failed user=«EMAIL» ip=«IPV4» ua=Mozilla/5.0 attempts=3",
    ),
    _t(
        "app_log",
        "mixed",
        "«~datetime» ERROR [payment] card=«CN_BANK_CARD» phone=«CN_MOBILE:plain» msg=余额不足 req=«~uuid»",
    ),
    _t(
        "app_log",
        "en",
        "«~iso_ts» DEBUG http GET /api/v2/users/«~num_id»/orders?since=«~ts_ms» 200 12ms client=«IPV6»",
    ),
    _t(
        "app_log",
        "en",
        'time=«~iso_ts» level=info msg="deploy finished" commit=«~git_sha» version=«~version:v» duration=«~duration»',
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» DEBUG config loaded: aws_access_key_id=«API_SECRET:aws» region=cn-north-1 bucket=logs-«~num6»",
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» ERROR upstream call failed: Authorization: Bearer «API_SECRET:jwt» status=401",
    ),
    _t(
        "app_log",
        "en",
        "[«~datetime»] worker «~sk_word» picked job «~uuid» (queue=default, retries=0, checksum=«~md5»)",
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» INFO sms sent to «CN_MOBILE:intl» template=SMS_«~num6» biz_id=«~order_no»",
    ),
    _t(
        "app_log",
        "en",
        '«IPV4» - - [«~clf_time»] "POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1" 200 5123 "-" "python-requests/2.31" rt=0.532',
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» WARN  leaked key in request body: key=«API_SECRET:google» path=/v1beta/models",
    ),
    _t("app_log", "en", "«~datetime» INFO git push by «EMAIL»: «~short_sha»..«~short_sha» main"),
    _t(
        "app_log",
        "zh",
        "«~datetime» INFO 固件升级完成 设备«~device_id» 版本 «~version:ip» 耗时«~duration»",
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» INFO build «~version:build» sha256:«~sha256» size=«~bytes» mac=«~mac»",
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» ERROR failed to load signing key from env:\n«API_SECRET:pem»\nhint: rotate it",
        5,
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» INFO dhcp lease renewed mac=«~mac» ip=«IPV4» host=«~hostname» lease=86400",
    ),
    _t("app_log", "zh", "«~datetime» [INFO] 用户«PERSON»登录成功，IP«IPV4»，设备ID«~uuid»"),
    _t(
        "app_log",
        "zh",
        "«~datetime» [WARN] 短信发送失败 手机号=«CN_MOBILE» 错误码=«~errcode» 请求号=«~order_no»",
    ),
    _t(
        "app_log",
        "zh",
        "«~datetime» [INFO] 回调成功 订单«~order_no» 金额«~amount»元 时间戳«~ts_ms» 签名«~md5»",
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» INFO tls: loaded certificate\n«~pem_public»\nfingerprint «~sha256»",
        4,
    ),
    _t(
        "app_log",
        "en",
        "«~datetime» INFO anpr camera=gate-3 plate=«CN_LICENSE_PLATE» confidence=0.97 frame=«~uuid»",
    ),
    _t(
        "app_log", "en", "«~datetime» DEBUG geo lookup «IPV6» -> coords=«~coords» isp=China Telecom"
    ),
    # ---- JSON payloads ----------------------------------------------------------------------
    _t(
        "json_payload",
        "zh",
        '{"user":{"name":"«PERSON»","mobile":"«CN_MOBILE:plain»","id_card":"«CN_RESIDENT_ID»","email":"«EMAIL»"},"order_id":"«~order_no»","created_at":«~ts_ms»}',
    ),
    _t(
        "json_payload",
        "en",
        '{"event":"payment.succeeded","amount":"«~amount»","currency":"CNY","card_last4":"«~last4»","request_id":"«~uuid»","ts":«~ts_ms»}',
    ),
    _t(
        "json_payload",
        "zh",
        '{"contents":[{"role":"user","parts":[{"text":"帮我写一封邮件给«PERSON»，她的邮箱是«EMAIL»，电话«CN_MOBILE»，约她«~date»见面"}]}]}',
    ),
    _t(
        "json_payload",
        "en",
        '{"contents":[{"role":"user","parts":[{"text":"Summarize this ticket: customer «PERSON», card «CREDIT_CARD», SSN «US_SSN»."}]}],"generationConfig":{"temperature":0.2}}',
    ),
    _t(
        "json_payload",
        "en",
        '{"config":{"openai_api_key":"«API_SECRET:openai»","github_token":"«API_SECRET:github»","timeout":30,"worker":"«~sk_word»"}}',
    ),
    _t(
        "json_payload",
        "en",
        '{"type":"service_account","private_key_id":"«~hex40»","private_key":"«API_SECRET:pem_json»","client_email":"«EMAIL»"}',
        5,
    ),
    _t(
        "json_payload",
        "zh",
        '{"shipment":{"tracking_no":"«~tracking»","weight_kg":1.25,"order":"«~order_no»","eta":"«~date»","fee":"«~amount»"}}',
    ),
    _t(
        "json_payload",
        "zh",
        '{"company":{"name":"«$company»","uscc":"«CN_USCC»","legal_rep":"«PERSON»","address":"«CN_ADDRESS»","tel":"«CN_LANDLINE»"}}',
    ),
    _t(
        "json_payload",
        "zh",
        '{"vehicle":{"plate":"«CN_LICENSE_PLATE»","owner":"«PERSON»","vin":"«~vin»","mobile":"«CN_MOBILE»"}}',
    ),
    _t(
        "json_payload",
        "en",
        '{"device":{"firmware":"«~version:ip»","serial":"«~serial»","mac":"«~mac»","uptime_ms":«~ts_ms»,"build":"«~git_sha»"}}',
    ),
    _t(
        "json_payload",
        "en",
        '{"transfer":{"iban":"«IBAN»","beneficiary":"«PERSON»","reference":"«~invoice_en»","amount":"«~price»"}}',
    ),
    _t(
        "json_payload",
        "zh",
        '{"contents":[{"parts":[{"text":"我的香港身份证是«HK_ID»，台湾身份证«TW_ID»，请帮我填写入境表格"}]}]}',
        5,
    ),
    _t(
        "json_payload",
        "en",
        '{"headers":{"x-goog-api-key":"«API_SECRET:google»","x-request-id":"«~uuid»"},"client_ip":"«IPV4»"}',
    ),
    _t(
        "json_payload",
        "mixed",
        '{"contents":[{"role":"user","parts":[{"text":"translate to English: 我住在«CN_ADDRESS»，手机«CN_MOBILE:intl»，passport no. «CN_PASSPORT»"}]}]}',
    ),
    _t(
        "json_payload",
        "en",
        '{"sku":"«~product_code»","isbn":"«~isbn»","price":"«~price»","stock_updated":«~ts_ms»,"batch":"«~id_bad»","ref":"«~luhn_bad»"}',
    ),
    # ---- CSV payloads -----------------------------------------------------------------------
    _t("csv_payload", "zh", _csv_roster, 7),
    _t("csv_payload", "zh", _csv_orders, 7),
    _t("csv_payload", "en", _csv_customers, 7),
    _t("csv_payload", "en", _csv_metrics, 7),
    _t("csv_payload", "mixed", _csv_logins, 7),
    _t("csv_payload", "zh", _csv_finance, 6),
    _t("csv_payload", "zh", _csv_stock, 6),
    # ---- e-mails ----------------------------------------------------------------------------
    _t(
        "email",
        "zh",
        "主题：关于合同续签\n\n«PERSON»您好：\n\n附件是续签合同，请核对贵司统一社会信用代码«CN_USCC»及开户信息（账号«CN_BANK_CARD»）。如有问题请致电«CN_LANDLINE»或发邮件至«EMAIL»。\n\n«PERSON»\n«$company»",
    ),
    _t(
        "email",
        "zh",
        "主题：会议通知\n\n各位同事：\n定于«~date»下午在会议室«~room»召开季度复盘会，腾讯会议号«~meeting_id»，请准时参加。«~name_like=方案»材料见共享盘。",
    ),
    _t(
        "email",
        "zh",
        "发件人：«PERSON» <«EMAIL»>\n收件人：«EMAIL»\n主题：报销单\n\n附上报销单，发票号码«~invoice8»，金额«~price»元，请审批。",
    ),
    _t(
        "email",
        "zh",
        "主题：快递信息\n\n您好，您的包裹已由«~tracking»发出，收件人«PERSON»，电话«CN_MOBILE:86»，地址«CN_ADDRESS»，请注意查收。",
    ),
    _t(
        "email",
        "en",
        "From: «PERSON» <«EMAIL»>\nTo: «EMAIL»\nSubject: Wire details\n\nHello,\nplease send the payment to IBAN «IBAN:spaced». Our office is at «CN_ADDRESS:en».\n\nRegards,\n«PERSON»",
    ),
    _t(
        "email",
        "en",
        "Subject: Release «~version:v» notes\n\nChanges since «~short_sha»: fixed a race in «~sk_word», bumped the firmware to version «~version:ip». Build id «~uuid».\n-- the release bot",
    ),
    _t(
        "email",
        "en",
        "Subject: Your API key\n\nHi «PERSON», here is the key you asked for: «API_SECRET:openai». Please rotate it after the demo on «~date».",
    ),
    _t(
        "email",
        "en",
        "Subject: Server access\n\n«PERSON», the bastion is at «IPV4» (fallback «IPV6»). Use the deploy token «API_SECRET:github» and call me on «CN_MOBILE:intl_spaced» if it fails.",
    ),
    _t(
        "email",
        "mixed",
        "Subject: 报销 reimbursement\n\nHi «PERSON»，我的信用卡«CREDIT_CARD»上个月被多扣了«~price»，statement见附件，我的手机«CN_MOBILE:intl»。\nThanks，«PERSON»",
    ),
    _t(
        "email",
        "mixed",
        "Subject: 车辆登记\n\nHi «PERSON»，公司车«CN_LICENSE_PLATE»的年检预约在«~date»，联系人«PERSON»（«CN_MOBILE»），VIN «~vin»。",
    ),
    # ---- prompts typed into a chat box ------------------------------------------------------
    _t(
        "prompt",
        "zh",
        "帮我写一份租房合同，出租方«PERSON»，身份证«CN_RESIDENT_ID»，承租方«PERSON»，身份证«CN_RESIDENT_ID»，房屋地址«CN_ADDRESS»，月租金«~price»元。",
    ),
    _t(
        "prompt",
        "zh",
        "请翻译成英文：我叫«PERSON»，手机号码是«CN_MOBILE:spaced»，车牌«CN_LICENSE_PLATE»，住在«CN_ADDRESS»。",
    ),
    _t("prompt", "zh", "分析一下这些订单号有什么规律：«~order_no»、«~order_no»、«~order_no»"),
    _t("prompt", "zh", "这段日志里的时间戳«~ts_ms»换算成北京时间是几点？另一个是«~ts_s»。"),
    _t(
        "prompt",
        "zh",
        "帮我检查这个SQL：SELECT * FROM orders WHERE phone='«CN_MOBILE:plain»' AND id_card='«CN_RESIDENT_ID»';",
    ),
    _t("prompt", "zh", "为什么金额«~amount»元会被当成手机号？订单«~order_no»，客户编号«~num11»"),
    _t(
        "prompt",
        "zh",
        "我的银行卡«CN_BANK_CARD»绑定的手机是«CN_MOBILE»，怎么解绑？开户人«PERSON»。",
    ),
    _t(
        "prompt",
        "zh",
        "帮我看看这批货：货架编号«~permit_like»，批号«~passport_like»，型号«~hkid_bad»，坐标«~coords»，«~name_like=江边»仓库。",
    ),
    _t(
        "prompt",
        "zh",
        "公司营业执照上的统一社会信用代码是«CN_USCC»，法人«PERSON»，注册地址«CN_ADDRESS»，帮我写个简介。",
    ),
    _t(
        "prompt",
        "zh",
        "写一段话介绍«~name_like=黄金»价格走势，附上交易参考号«~luhn_bad»和清算日期«~date»。",
    ),
    _t(
        "prompt",
        "en",
        "Draft a polite reminder to «PERSON» (<«EMAIL»>) that invoice «~invoice_en» for «~price» is overdue.",
    ),
    _t("prompt", "en", "Is this a valid IBAN: «IBAN»? And what about «~iban_bad»?"),
    _t(
        "prompt",
        "en",
        "Explain this git history: «~short_sha» fix tests; «~short_sha» bump to «~version:v»; «~short_sha» merge PR #«~small».",
    ),
    _t(
        "prompt",
        "en",
        "My SSN is «US_SSN» and my card is «CREDIT_CARD». Can you fill in this form for «PERSON» at «CN_ADDRESS:en»?",
    ),
    _t(
        "prompt",
        "en",
        "Convert the UUID «~uuid» and the epoch «~ts_ms» to something readable, and check ISBN «~isbn».",
    ),
    _t(
        "prompt",
        "en",
        "Here is my server config, why does it fail? host «IPV6» port 8443, token «API_SECRET:github»",
    ),
    _t(
        "prompt",
        "en",
        "Write a cover letter for «PERSON», «CN_ADDRESS:en», phone «CN_MOBILE:intl_spaced», applying for the role of «$title_en».",
    ),
    _t(
        "prompt",
        "mixed",
        "帮我debug：request from «IPV4» 带了header Authorization: Bearer «API_SECRET:jwt»，返回403",
    ),
    _t(
        "prompt",
        "mixed",
        "把这个JSON里的«~uuid»和«~git_sha»解释一下，另外version «~version:v»是什么意思",
    ),
    _t("prompt", "mixed", "我的AWS key «API_SECRET:aws» 泄露了怎么办？账号邮箱«EMAIL»"),
    _t(
        "prompt",
        "mixed",
        "这个SKU «~product_code» 的库存是多少？上次入库«~datetime»，serial «~serial»",
    ),
    _t(
        "prompt",
        "mixed",
        "帮我formatting一下这个private key：\n«API_SECRET:pem»\n然后发给«PERSON»",
        4,
    ),
    _t(
        "prompt",
        "mixed",
        "我的Google API key是«API_SECRET:google»，project owner «PERSON:en»，怎么限制只能从«IPV4»访问？",
    ),
    _t(
        "prompt",
        "mixed",
        "Help me 写个tracking页面，快递«~tracking»，运费«~amount»元，版本«~version:ip»。",
    ),
)
